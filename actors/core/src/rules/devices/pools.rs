//! A DRA driver's resource pools on one node, and whether each is complete,
//! as resource.k8s.io/v1 defines it (semantics.md §6.8): only the slices of a
//! pool's highest generation count (older ones are left over from before the
//! driver's last change), and as many as their `resourceSliceCount` says.

use std::collections::BTreeMap;
use std::fmt;

use crate::vocab::model::SliceInfo;

/// One pool of one driver on the node, at its highest generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    /// The highest `spec.pool.generation` among the pool's slices.
    pub generation: i64,
    /// How many slices carry that generation.
    pub seen: usize,
    /// The `resourceSliceCount` those slices state; more than one value
    /// when they disagree (a driver mid-update, or a broken one).
    pub counts: Vec<i64>,
}

impl Pool {
    /// Every slice of the highest generation is there, and they agree on
    /// how many there are.
    pub fn is_complete(&self) -> bool {
        match self.counts[..] {
            [count] => i64::try_from(self.seen).is_ok_and(|seen| seen == count),
            _ => false,
        }
    }
}

impl fmt::Display for Pool {
    /// Why the pool is (or is not) complete, for `explain` and the journal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, generation, seen) = (&self.name, self.generation, self.seen);
        match self.counts[..] {
            [count] if self.is_complete() => write!(
                f,
                "pool {name} complete ({count} of {count} ResourceSlices at generation {generation})"
            ),
            [count] => {
                let missing = count.saturating_sub(i64::try_from(seen).unwrap_or(i64::MAX));
                if missing > 0 {
                    write!(
                        f,
                        "pool {name} incomplete: {seen} of {count} ResourceSlices at generation \
                         {generation} ({missing} missing)"
                    )
                } else {
                    write!(
                        f,
                        "pool {name} incomplete: {seen} ResourceSlices at generation {generation}, \
                         more than the {count} they state"
                    )
                }
            }
            _ => {
                let counts: Vec<String> = self.counts.iter().map(ToString::to_string).collect();
                let counts = counts.join(", ");
                write!(
                    f,
                    "pool {name} incomplete: its {seen} ResourceSlices at generation {generation} \
                     disagree on resourceSliceCount ({counts})"
                )
            }
        }
    }
}

/// The pools `driver` publishes in `slices` (a node's local slices), by
/// pool name, each at its highest generation.
pub fn pools(slices: &[SliceInfo], driver: &str) -> Vec<Pool> {
    let mut by_name: BTreeMap<&str, Pool> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.driver == driver) {
        let pool = by_name.entry(&s.pool).or_insert_with(|| Pool {
            name: s.pool.clone(),
            generation: s.generation,
            seen: 0,
            counts: Vec::new(),
        });
        if s.generation > pool.generation {
            // A newer generation: what was counted is left over.
            pool.generation = s.generation;
            pool.seen = 0;
            pool.counts.clear();
        }
        if s.generation == pool.generation {
            pool.seen += 1;
            if !pool.counts.contains(&s.slice_count) {
                pool.counts.push(s.slice_count);
                pool.counts.sort_unstable();
            }
        }
    }
    by_name.into_values().collect()
}
