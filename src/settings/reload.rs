//! Config reload: what a new `--config` file would put in force, decided
//! without touching anything ([`decide`]), and the poller that notices the
//! file changed ([`FilePoller`]). The new file goes through exactly what the
//! file went through at start ([`run_settings_from`]), so a file that would
//! not start nodegate is never applied. Which keys apply live:
//! docs/configuration.md, "Reloading the file without a restart".

use std::path::{Path, PathBuf};

use nodegate_core::vocab::config::Config;

use crate::settings::cli::RunArgs;
use crate::settings::config::{FileConfig, RunSettings, run_settings_from};

/// What a valid new file puts in force.
#[derive(Debug)]
pub struct Reloaded {
    pub config: Config,
    /// Keys (as the file spells them) whose new value differs from the one
    /// in force but that only a restart applies.
    pub needs_restart: Vec<&'static str>,
    /// Managed taints (KEY:EFFECT) the new file does not name and that
    /// nodegate keeps removing ([`retire_dropped_taints`]).
    pub retired: Vec<String>,
}

/// Decides a reload of the file's bytes `text` (read from `origin`) against
/// the settings nodegate started with and the gate configuration in force.
/// The error says what a person must fix; nothing is changed either way.
pub fn decide(
    args: &RunArgs,
    text: &str,
    origin: &str,
    started: &RunSettings,
    current: &Config,
) -> Result<Reloaded, String> {
    let file = FileConfig::parse(text, origin).map_err(|e| e.to_string())?;
    let new = run_settings_from(args, file).map_err(|e| format!("{origin}: {e}"))?;
    if new.gate.critical != current.critical {
        return Err(format!(
            "{origin}: criticalPods changed, and that key needs a restart (the watches of \
             critical pods are set up at start); the file was not applied: restore the \
             criticalPods in force, or restart nodegate to apply it"
        ));
    }
    if started.gate.dra_drivers.is_empty() && !new.gate.dra_drivers.is_empty() {
        return Err(format!(
            "{origin}: draDrivers is set, and nodegate started without it, so it does not \
             watch ResourceSlices; the file was not applied: remove draDrivers, or restart \
             nodegate to apply it"
        ));
    }
    // The keys of reload class `restart` in the settings table.
    let mut needs_restart = started.given.restart_changes(&new.given);
    let mut config = Config::from(&new);
    // Read once at start by the late-taint net too: kept as started.
    config.dry_run = started.given.dry_run;
    config.node_condition = started.given.node_condition;
    // The canary pods' watch and template are set up at start.
    if new.gate.canary != started.gate.canary {
        needs_restart.push("canary");
    }
    config.canary = Config::from(started).canary;
    let retired = retire_dropped_taints(current, &mut config);
    Ok(Reloaded {
        config,
        needs_restart,
        retired,
    })
}

/// A managed taint (startup or re-gate) the new file no longer names stays
/// managed, after the new ones, until a restart: nodes carrying it stay gated
/// and opening removes it, but no entrance adds it (they add the first). Replicas
/// read a changed ConfigMap up to about a minute apart, and one still on the old
/// file keeps tainting new nodes with it: were it forgotten, they would never open.
fn retire_dropped_taints(current: &Config, new: &mut Config) -> Vec<String> {
    let mut retired = Vec::new();
    for t in &current.placement.managed_taints {
        if !new.placement.managed_taints.contains(t) {
            new.placement.managed_taints.push(t.clone());
            retired.push(format!("{}:{}", t.key, t.effect));
        }
    }
    retired
}

/// How often the file is read again.
pub const POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// What a look at the file found.
#[derive(Debug, PartialEq, Eq)]
pub enum Look {
    /// Same bytes as last time (or still unreadable).
    Unchanged,
    /// New bytes, to decide on.
    Changed(String),
    /// The file cannot be read (or is not UTF-8) any more.
    Unreadable(String),
}

/// Notices that the config file changed by comparing its *contents* with
/// the last read. Reading the path follows symlinks, so a ConfigMap volume's
/// update (a new `..data` directory swapped in by renaming a symlink, which
/// a watch on the file itself would miss) is seen like any edit.
#[derive(Debug)]
pub struct FilePoller {
    path: PathBuf,
    /// The text last read; `None` while the file cannot be read.
    seen: Option<String>,
}

impl FilePoller {
    /// Starts from the file as it is now (as applied at start).
    pub fn new(path: &Path) -> FilePoller {
        FilePoller {
            path: path.to_path_buf(),
            seen: read(path).ok(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text last read, if the file could be read.
    pub fn text(&self) -> Option<&str> {
        self.seen.as_deref()
    }

    /// Reads the file; `force` (SIGHUP) reports it as changed even if its
    /// text is the same, and reports an unreadable file again.
    pub fn look(&mut self, force: bool) -> Look {
        match read(&self.path) {
            Ok(text) if !force && self.seen.as_deref() == Some(text.as_str()) => Look::Unchanged,
            Ok(text) => {
                self.seen = Some(text.clone());
                Look::Changed(text)
            }
            // Reported once when it goes, not at every poll.
            Err(why) if self.seen.take().is_some() || force => Look::Unreadable(why),
            Err(_) => Look::Unchanged,
        }
    }
}

/// The file's text, capped like the first read: a reload never reads more.
fn read(path: &Path) -> Result<String, String> {
    crate::settings::config::load::read_capped(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
