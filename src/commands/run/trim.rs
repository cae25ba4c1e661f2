//! Giving memory back after a burst.
//!
//! When a thousand nodes join and leave, or a re-list has come and gone,
//! the gates, projections and buffers they needed are freed — but glibc's
//! allocator keeps freed pages in its arenas rather than handing them back
//! to the kernel, so the process's resident memory stays at the burst's
//! height (the churn benchmark saw 18.6 MiB before the first wave and about
//! 43 MiB, level, after each of ten waves whose state was all gone). Every
//! [`PERIOD`], this task adds up the entries of every map that grows with
//! the nodes (the figures of `nodegate_map_entries`); when they fell well
//! below their peak since the last trim ([`Trim::observe`]), it asks glibc
//! to return its free pages (`malloc_trim`). Nothing else is done with
//! memory here, and on a C library without `malloc_trim` it does nothing.

use std::sync::Arc;
use std::time::Duration;

use nodegate_actors::router::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the maps are looked at.
pub const PERIOD: Duration = Duration::from_secs(10);

/// At least this many entries must have gone since the peak, and at least
/// a tenth of the peak: a gate that ends or a node deleted now and then is
/// not worth a trim.
const MIN_DROP: usize = 500;

/// When to trim, from the map sizes seen every period.
#[derive(Debug, Default)]
pub struct Trim {
    /// The most entries seen since the last trim.
    peak: usize,
}

impl Trim {
    /// `entries` are held now; true when the memory of a burst has been
    /// freed since the last trim: they fell by [`MIN_DROP`] and by a tenth
    /// from their peak. The peak then starts again from here.
    pub fn observe(&mut self, entries: usize) -> bool {
        self.peak = self.peak.max(entries);
        let dropped = self.peak - entries;
        if dropped >= MIN_DROP && dropped.saturating_mul(10) >= self.peak {
            self.peak = entries;
            true
        } else {
            false
        }
    }
}

/// Runs the check every [`PERIOD`] until `stop` turns true.
pub fn spawn(router: Arc<Router>, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut trim = Trim::default();
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let entries: usize = router.map_sizes().iter().map(|(_, n)| n).sum();
            if trim.observe(entries) {
                let _ = tokio::task::spawn_blocking(release).await;
                tracing::debug!(entries, "returned the memory of a burst to the kernel");
            }
        }
    })
}

/// Asks the allocator to return its free pages to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release() {
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks;
    // it takes no pointer and leaves every live allocation where it is.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_that_is_gone_trims_once() {
        let mut t = Trim::default();
        assert!(!t.observe(100));
        assert!(!t.observe(3_100), "growing");
        assert!(!t.observe(3_000), "a few gone: not worth it");
        assert!(t.observe(120), "the burst is gone");
        assert!(!t.observe(120), "nothing freed since");
        assert!(!t.observe(110));
    }

    #[test]
    fn a_small_drop_of_a_large_cluster_does_not_trim() {
        let mut t = Trim::default();
        assert!(!t.observe(455_000));
        assert!(!t.observe(454_000), "1,000 entries of 455,000 are not a tenth");
        assert!(t.observe(400_000), "a tenth and more");
        assert!(!t.observe(399_000));
    }

    #[test]
    fn the_next_burst_is_measured_from_after_the_trim() {
        let mut t = Trim::default();
        t.observe(2_000);
        assert!(t.observe(0));
        assert!(!t.observe(600));
        assert!(t.observe(0), "600 gone from a peak of 600");
    }
}
