//! Who led when, from nodegate's own logs, read where the real node's
//! kubelet writes them (its podLogsDir under the cluster's state dir). The
//! files of a deleted pod go with it, so a thread copies every log as it
//! grows, and the leadership intervals are judged from the copies at the
//! end: two pods must never have led at the same time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use jiff::Timestamp;

pub(super) struct Recorder {
    stop: Arc<AtomicBool>,
    logs: Arc<Mutex<BTreeMap<PathBuf, String>>>,
    thread: Option<JoinHandle<()>>,
}

/// One pod's time as the leader: from "became leader" to "stopped leading"
/// or "lost leadership", or open (`None`) when its log ends first.
#[derive(Debug)]
pub(super) struct Term {
    pub pod: String,
    pub from: Timestamp,
    pub to: Option<Timestamp>,
}

impl Recorder {
    /// Copies the logs of every pod of namespace `ns` under `pod_logs`.
    pub(super) fn start(pod_logs: PathBuf, ns: &str) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let logs = Arc::new(Mutex::new(BTreeMap::new()));
        let prefix = format!("{ns}_");
        let thread = {
            let (stop, logs) = (stop.clone(), logs.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    copy_logs(&pod_logs, &prefix, &logs);
                    std::thread::sleep(Duration::from_millis(100));
                }
                copy_logs(&pod_logs, &prefix, &logs);
            })
        };
        Recorder {
            stop,
            logs,
            thread: Some(thread),
        }
    }

    /// Stops copying; every pod's log as last seen, by pod directory name.
    pub(super) fn stop(mut self) -> BTreeMap<String, String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let logs = self.logs.lock().map(|l| l.clone()).unwrap_or_default();
        logs.into_iter()
            .map(|(path, text)| (pod_of(&path), text))
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `<ns>_<pod>_<uid>` of a log file `<ns>_<pod>_<uid>/<container>/<n>.log`.
fn pod_of(path: &Path) -> String {
    path.parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn copy_logs(pod_logs: &Path, prefix: &str, logs: &Mutex<BTreeMap<PathBuf, String>>) {
    let Ok(pods) = std::fs::read_dir(pod_logs) else {
        return;
    };
    for pod in pods.flatten() {
        if !pod.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let Ok(containers) = std::fs::read_dir(pod.path()) else {
            continue;
        };
        for c in containers.flatten() {
            let Ok(files) = std::fs::read_dir(c.path()) else {
                continue;
            };
            for f in files.flatten() {
                let Ok(text) = std::fs::read_to_string(f.path()) else {
                    continue;
                };
                if let Ok(mut all) = logs.lock() {
                    // Logs only grow; a file seen shorter was being rotated
                    // or removed mid-read: keep the longer copy.
                    let known = all.entry(f.path()).or_default();
                    if text.len() >= known.len() {
                        *known = text;
                    }
                }
            }
        }
    }
}

/// The time of a log line: nodegate's own timestamp (its text format starts
/// with one), else the runtime's (CRI log lines start with one).
fn line_time(line: &str) -> Option<(Timestamp, &str)> {
    // CRI: "<time> <stream> <P|F> <message>".
    let mut parts = line.splitn(4, ' ');
    let cri: Timestamp = parts.next()?.parse().ok()?;
    let message = parts.nth(2).unwrap_or("");
    let own = message
        .split_whitespace()
        .next()
        .and_then(|t| t.parse::<Timestamp>().ok());
    Some((own.unwrap_or(cri), message))
}

/// The lines a leader writes once it has stopped writing: on shutdown
/// before it releases the lease, or when it lost the lease.
const ENDS: &[&str] = &[
    "stopped leading",
    "lost leadership",
    "cannot release the lease",
    "releasing the lease timed out",
];

/// Every pod's terms as the leader, in time order.
pub(super) fn terms(logs: &BTreeMap<String, String>) -> Vec<Term> {
    let mut all = Vec::new();
    for (pod, text) in logs {
        let mut open: Option<Timestamp> = None;
        for (at, message) in text.lines().filter_map(line_time) {
            if message.contains("became leader") {
                open.get_or_insert(at);
            } else if ENDS.iter().any(|e| message.contains(e))
                && let Some(from) = open.take()
            {
                all.push(Term {
                    pod: pod.clone(),
                    from,
                    to: Some(at),
                });
            }
        }
        if let Some(from) = open {
            all.push(Term {
                pod: pod.clone(),
                from,
                to: None,
            });
        }
    }
    all.sort_by_key(|t| t.from);
    all
}

/// The pairs of terms that overlap (two leaders at once), described.
pub(super) fn overlaps(terms: &[Term]) -> Vec<String> {
    terms
        .windows(2)
        .filter(|w| w[0].to.is_none_or(|to| to > w[1].from))
        .map(|w| {
            format!(
                "{} led from {} to {:?}, and {} from {}",
                w[0].pod, w[0].from, w[0].to, w[1].pod, w[1].from
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[&str]) -> String {
        lines
            .iter()
            .map(|l| format!("2026-01-01T00:00:00Z stdout F {l}\n"))
            .collect()
    }

    #[test]
    fn a_second_leader_before_the_first_released_is_an_overlap() {
        let logs = BTreeMap::from([
            (
                "ns_a_1".to_string(),
                log(&[
                    "2026-01-01T00:00:01Z  INFO x: became leader",
                    "2026-01-01T00:00:05Z  INFO x: stopped leading (shutting down); releasing the lease",
                ]),
            ),
            (
                "ns_b_2".to_string(),
                log(&["2026-01-01T00:00:04Z  INFO x: became leader"]),
            ),
        ]);
        assert_eq!(overlaps(&terms(&logs)).len(), 1);
    }

    #[test]
    fn a_handover_after_the_release_is_not_an_overlap() {
        let logs = BTreeMap::from([
            (
                "ns_a_1".to_string(),
                log(&[
                    "2026-01-01T00:00:01Z  INFO x: became leader",
                    "2026-01-01T00:00:05Z  INFO x: stopped leading (shutting down); releasing the lease",
                ]),
            ),
            (
                "ns_b_2".to_string(),
                log(&["2026-01-01T00:00:06Z  INFO x: became leader"]),
            ),
        ]);
        let t = terms(&logs);
        assert_eq!(t.len(), 2);
        assert!(overlaps(&t).is_empty(), "{t:?}");
    }
}
