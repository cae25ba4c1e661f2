//! Memory and CPU of processes, read from /proc by polling.
//!
//! A watched process counts together with its descendants (the controller may
//! be started through a wrapper). Resident memory is sampled (the peak of the
//! sum over the tree); CPU time is utime + stime, kept per pid so a child that
//! exits still counts with its last reading. The kernel's own high-water mark
//! (VmHWM) of the root process is read too: it cannot miss a short peak
//! between two polls. The resident memory is also split into its anonymous
//! part (the heap and stacks) and its file-backed part (the binary's code
//! and data as the kernel maps them in): a peer written in another language
//! carries another runtime and binary, and the split shows which part a
//! ratio of two peaks comes from. Linux only; nothing here writes anything.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

/// Clock ticks per second for /proc/PID/stat times. 100 on every Linux this
/// benchmark is meant for; `getconf CLK_TCK` says otherwise if it is not.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn page_size() -> u64 {
    std::process::Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(4096)
}

/// The fields of /proc/PID/stat from field 3 (state) on: the command's
/// name before them is in parentheses and may hold spaces.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = text.get(text.rfind(')')? + 2..)?;
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// (ppid, utime + stime in ticks, rss in pages) from /proc/PID/stat.
fn read_stat(pid: u32) -> Option<(u32, u64, u64)> {
    let f = stat_fields(pid)?;
    // ppid is field 4, utime 14, stime 15, rss 24.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let rss = f.get(21)?.parse().ok()?;
    Some((ppid, utime + stime, rss))
}

/// A process's state letter and start time (ticks after boot: with the pid,
/// what tells it from a later process given the same pid).
#[cfg(test)]
pub fn state_and_start(pid: u32) -> Option<(String, u64)> {
    let f = stat_fields(pid)?;
    // state is field 3, starttime 22.
    Some((f.first()?.clone(), f.get(19)?.parse().ok()?))
}

/// Every process's pid.
fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
}

/// Whether a process of group `pgid`, other than a zombie, exists.
pub fn group_alive(pgid: u32) -> bool {
    let pgid = pgid.to_string();
    pids().any(|pid| {
        // state is field 3, pgrp 5.
        stat_fields(pid)
            .is_some_and(|f| f.first().is_some_and(|s| s != "Z") && f.get(2) == Some(&pgid))
    })
}

/// A live process's /proc/PID/status.
fn status(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// The value of a `Key:   123 kB` line of /proc/PID/status, in KiB.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// VmHWM of a live process, in KiB.
pub fn high_water_kib(pid: u32) -> Option<u64> {
    status_kib(&status(pid)?, "VmHWM")
}

/// A live process's resident memory now, in KiB, read at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// VmRSS.
    pub total: u64,
    /// RssAnon: the heap, stacks and other private memory.
    pub anon: u64,
    /// RssFile: pages of mapped files, the binary's code first.
    pub file: u64,
}

/// [`Resident`] of a live process, from one read of its status.
pub fn resident_kib(pid: u32) -> Option<Resident> {
    let status = status(pid)?;
    Some(Resident {
        total: status_kib(&status, "VmRSS")?,
        anon: status_kib(&status, "RssAnon")?,
        file: status_kib(&status, "RssFile")?,
    })
}

/// Every process and its parent, for finding descendants.
fn all_parents() -> HashMap<u32, u32> {
    pids()
        .filter_map(|pid| Some((pid, read_stat(pid)?.0)))
        .collect()
}

fn tree(root: u32, parents: &HashMap<u32, u32>) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// One watched process tree.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub name: String,
    pub root: u32,
    /// Count the root's descendants too.
    children: bool,
    /// Last CPU reading per pid, in ticks.
    cpu: HashMap<u32, u64>,
    /// CPU ticks of the tree when measurement started.
    baseline: u64,
    peak_rss_pages: u64,
    /// The peaks of the tree's anonymous and file-backed resident memory,
    /// each on its own (they need not peak in the same poll).
    peak_anon_kib: u64,
    peak_file_kib: u64,
    samples: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub peak_rss_mib: f64,
    /// The kernel's high-water mark of the root process (MiB), when it was
    /// still alive to be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_hwm_mib: Option<f64>,
    /// The peak of the anonymous resident memory (heap, stacks), MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_anon_mib: Option<f64>,
    /// The peak of the file-backed resident memory (the binary and the
    /// libraries as mapped), MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_file_mib: Option<f64>,
    pub cpu_s: f64,
    pub samples: u64,
}

pub struct Sampler {
    pub tracked: Vec<Tracked>,
    ticks: f64,
    page: u64,
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Sampler {
    pub fn new() -> Sampler {
        Sampler {
            tracked: Vec::new(),
            ticks: clock_ticks(),
            page: page_size(),
        }
    }

    pub fn track(&mut self, name: &str, root: u32, children: bool) {
        self.tracked.push(Tracked {
            name: name.to_string(),
            root,
            children,
            cpu: HashMap::new(),
            baseline: 0,
            peak_rss_pages: 0,
            peak_anon_kib: 0,
            peak_file_kib: 0,
            samples: 0,
        });
    }

    /// Reads every tracked tree once.
    pub fn sample(&mut self) {
        let parents = all_parents();
        for t in &mut self.tracked {
            let (mut rss, mut anon, mut file) = (0, 0, 0);
            let mut seen = false;
            let pids = if t.children {
                tree(t.root, &parents)
            } else {
                vec![t.root]
            };
            for pid in pids {
                if let Some((_, cpu, pages)) = read_stat(pid) {
                    t.cpu.insert(pid, cpu);
                    rss += pages;
                    seen = true;
                    if let Some(now) = resident_kib(pid) {
                        anon += now.anon;
                        file += now.file;
                    }
                }
            }
            if seen {
                t.samples += 1;
                t.peak_rss_pages = t.peak_rss_pages.max(rss);
                t.peak_anon_kib = t.peak_anon_kib.max(anon);
                t.peak_file_kib = t.peak_file_kib.max(file);
            }
        }
    }

    /// From now on CPU counts from here, and peaks start again, for every
    /// tracked tree but those named in `keep` (which count their whole life).
    pub fn reset(&mut self, keep: &[&str]) {
        self.sample();
        for t in self
            .tracked
            .iter_mut()
            .filter(|t| !keep.contains(&t.name.as_str()))
        {
            t.baseline = t.cpu.values().sum();
            t.peak_rss_pages = 0;
            t.peak_anon_kib = 0;
            t.peak_file_kib = 0;
            t.samples = 0;
        }
        self.sample();
    }

    pub fn usage(&self) -> Vec<(String, Usage)> {
        self.tracked
            .iter()
            .map(|t| {
                let cpu: u64 = t.cpu.values().sum();
                (
                    t.name.clone(),
                    Usage {
                        peak_rss_mib: (t.peak_rss_pages * self.page) as f64 / 1_048_576.0,
                        vm_hwm_mib: high_water_kib(t.root).map(|k| k as f64 / 1024.0),
                        peak_rss_anon_mib: (t.peak_anon_kib > 0)
                            .then(|| t.peak_anon_kib as f64 / 1024.0),
                        peak_rss_file_mib: (t.peak_file_kib > 0)
                            .then(|| t.peak_file_kib as f64 / 1024.0),
                        cpu_s: cpu.saturating_sub(t.baseline) as f64 / self.ticks,
                        samples: t.samples,
                    },
                )
            })
            .collect()
    }
}

/// How often the sampler polls: fine enough to catch the controller's
/// memory peak during the burst of node joins, cheap enough (a few ms of CPU
/// a second) not to disturb it.
pub const INTERVAL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_by_their_whole_key() {
        let status = "Name:\tnodegate\nVmHWMx:\t 9 kB\nVmHWM:\t   41352 kB\n\
                      RssAnon:\t   21564 kB\nRssFile:\t   19788 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(41352));
        assert_eq!(status_kib(status, "RssAnon"), Some(21564));
        assert_eq!(status_kib(status, "RssFile"), Some(19788));
        assert_eq!(status_kib(status, "RssShmem"), None);
        assert_eq!(status_kib(status, "Name"), None, "not a number of kB");
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let (_, _, rss) = read_stat(me).expect("own /proc/PID/stat");
        assert!(rss > 0);
        assert!(high_water_kib(me).is_some_and(|k| k > 0));
        let mut s = Sampler::new();
        s.track("me", me, false);
        s.sample();
        let u = s.usage();
        assert!(u[0].1.peak_rss_mib > 0.0);
        // The split: a running test has a heap and a mapped binary, and the
        // two parts are read from the same kernel counters as the whole.
        let now = resident_kib(me).expect("own VmRSS, RssAnon and RssFile");
        assert!(now.anon > 0 && now.file > 0, "{now:?}");
        // VmRSS is the sum of the three Rss lines (RssShmem the third).
        assert!(now.anon + now.file <= now.total, "{now:?}");
        let (anon, file) = (
            u[0].1.peak_rss_anon_mib.expect("an anonymous peak"),
            u[0].1.peak_rss_file_mib.expect("a file-backed peak"),
        );
        assert!(anon > 0.0 && file > 0.0);
        assert!(
            anon + file <= u[0].1.peak_rss_mib + 2.0,
            "anon {anon} + file {file} MiB against a peak of {} MiB",
            u[0].1.peak_rss_mib
        );
    }
}
