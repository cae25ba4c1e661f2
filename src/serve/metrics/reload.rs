//! The config reload's series: reloads applied and refused, whether the last
//! one was applied, and when the configuration in force was applied.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::reg;

pub struct ConfigMetrics {
    reloads: Counter,
    failures: Counter,
    last_successful: Gauge,
    /// When the configuration in force was applied (Unix seconds).
    pub applied_at: Gauge,
}

impl ConfigMetrics {
    pub(super) fn register(r: &mut Registry) -> ConfigMetrics {
        let m = ConfigMetrics {
            reloads: reg(
                r,
                "config_reloads",
                "Config file reloads applied without a restart (file change or SIGHUP)",
            ),
            failures: reg(
                r,
                "config_reload_failures",
                "Config file reloads refused (unreadable, invalid, or changing a key that needs a restart); the settings in force stayed",
            ),
            last_successful: reg(
                r,
                "config_last_reload_successful",
                "1 unless the last config reload was refused (1 before any reload)",
            ),
            applied_at: reg(
                r,
                "config_applied_timestamp_seconds",
                "When the gate configuration in force was applied (Unix seconds): start, or the last reload applied",
            ),
        };
        m.last_successful.set(1);
        m
    }

    /// A reload put a new configuration in force at `unix_seconds`.
    pub fn reload_applied(&self, unix_seconds: i64) {
        self.reloads.inc();
        self.last_successful.set(1);
        self.applied_at.set(unix_seconds);
    }

    /// A reload was refused; the configuration in force stays.
    pub fn reload_refused(&self) {
        self.failures.inc();
        self.last_successful.set(0);
    }
}
