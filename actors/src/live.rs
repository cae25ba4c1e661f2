//! The gate configuration in force: one [`Config`] shared by the router,
//! every gate and the entrances, replaced whole when the config file is
//! reloaded. Readers take the current one with a lock-free load at each use
//! (a gate at every step), so a reload reaches everyone without a message
//! (the live gates react through [`crate::router::Router::reconfigure`]).

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use nodegate_core::vocab::config::Config;

pub struct LiveConfig(ArcSwap<Config>);

impl LiveConfig {
    pub fn new(config: Arc<Config>) -> Self {
        LiveConfig(ArcSwap::new(config))
    }

    /// The configuration in force now; cheap, for one use (do not keep it
    /// across an await: take it again next time).
    pub fn load(&self) -> Guard<Arc<Config>> {
        self.0.load()
    }

    /// The configuration in force now, to keep.
    pub fn current(&self) -> Arc<Config> {
        self.0.load_full()
    }

    /// Puts `config` in force for every later load.
    pub(crate) fn store(&self, config: Arc<Config>) {
        self.0.store(config);
    }
}
