//! Shared strings: the model's most repeated values (a pod's namespace, node,
//! owner and phase; a node's condition types and statuses) held once. As
//! `String`s they were four allocations a pod, about 150 bytes, for a handful
//! of values (docs/benchmarks.md, "65,000 open nodes"). A [`Shared`] is
//! `arcstr`'s `ArcStr`: 8 bytes, its length in the allocation (an `Arc<str>`
//! takes 16).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;

use arcstr::ArcStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An immutable string, shared by reference count.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shared(ArcStr);

impl Shared {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Shared {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Shared {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Shared {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// A [`Shared`] copy of each string type.
macro_rules! from_text {
    ($($t:ty),+) => {
        $(impl From<$t> for Shared {
            fn from(s: $t) -> Self {
                Shared(ArcStr::from(s))
            }
        })+
    };
}
from_text!(&str, String, &String);

impl From<Shared> for String {
    fn from(s: Shared) -> Self {
        s.0.to_string()
    }
}

text_eq!(Shared: str, &str, String);

impl Serialize for Shared {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Shared {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Shared::from)
    }
}

/// Hands out one [`Shared`] per distinct value. Hashed with foldhash
/// (seeded per process, as the router's maps): SipHash was 2 % of the
/// controller's instructions, for about nine lookups a watch event.
#[derive(Debug, Default)]
pub struct Interner {
    values: HashSet<Shared, foldhash::fast::RandomState>,
    /// How many values were held after the last pruning.
    kept: usize,
    /// Objects gone since the last pruning ([`Interner::released`]).
    released: usize,
}

/// At least this many objects go before [`Interner::released`] prunes.
const RELEASED_BEFORE_PRUNING: usize = 64;

impl Interner {
    /// The shared copy of `s`.
    pub fn get(&mut self, s: &str) -> Shared {
        if let Some(v) = self.values.get(s) {
            return v.clone();
        }
        // Forget the values only this interner still holds, each time the
        // set has doubled since the last time: amortised O(1) a value, and
        // a cluster's churn cannot grow it without bound.
        if self.values.len() >= 2 * self.kept.max(512) {
            self.prune();
        }
        let v = Shared::from(s);
        self.values.insert(v.clone());
        v
    }

    /// An object whose values it handed out is gone (deleted from the
    /// cluster). Once a quarter as many objects as it holds values have gone
    /// (at least [`RELEASED_BEFORE_PRUNING`]), it forgets the values nobody
    /// else holds: after a burst of nodes has come and gone, their names and
    /// labels do not stay behind, each pinning a page of memory that the
    /// burst freed around it. Amortised O(1) an object; the values of the
    /// last few objects gone (and of any still held elsewhere for a moment)
    /// wait for the next pruning.
    pub fn released(&mut self) {
        self.released += 1;
        if self.released >= (self.values.len() / 4).max(RELEASED_BEFORE_PRUNING) {
            self.prune();
        }
    }

    /// Forgets the values only it still holds.
    fn prune(&mut self) {
        self.values
            .retain(|v| ArcStr::strong_count(&v.0).is_none_or(|n| n > 1));
        self.values.shrink_to_fit();
        self.kept = self.values.len();
        self.released = 0;
    }

    /// How many distinct values it holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_allocation_per_value_and_it_reads_like_a_string() {
        let mut i = Interner::default();
        let a = i.get("kube-system");
        let b = i.get("kube-system");
        assert!(ArcStr::ptr_eq(&a.0, &b.0));
        assert_eq!(a, "kube-system");
        assert_eq!(a, "kube-system".to_string());
        assert_eq!(a.len(), 11);
        assert_eq!(
            serde_json::to_string(&a).ok().as_deref(),
            Some("\"kube-system\"")
        );
    }

    #[test]
    fn values_nobody_holds_are_forgotten_as_it_grows() {
        let mut i = Interner::default();
        let kept = i.get("kept");
        for n in 0..10_000 {
            i.get(&format!("node-{n}"));
        }
        assert!(i.len() <= 1024, "{} values held", i.len());
        assert!(ArcStr::ptr_eq(&i.get("kept").0, &kept.0));
    }

    /// Growth alone prunes only when the set doubles: 600 values of nodes
    /// that came and went stay. Their objects' release forgets them, and
    /// keeps what is still held.
    #[test]
    fn values_of_released_objects_are_forgotten_once_enough_have_gone() {
        let mut i = Interner::default();
        let kept = i.get("kept");
        for n in 0..600 {
            i.get(&format!("node-{n}"));
        }
        assert_eq!(i.len(), 601, "growth alone does not prune yet");
        for _ in 1..RELEASED_BEFORE_PRUNING.max(601 / 4) {
            i.released();
        }
        assert_eq!(i.len(), 601, "one release short of pruning");
        i.released();
        assert_eq!(i.len(), 1, "only the value still held is kept");
        assert!(ArcStr::ptr_eq(&i.get("kept").0, &kept.0));
        for _ in 1..RELEASED_BEFORE_PRUNING {
            i.released();
        }
        i.get("node-1");
        assert_eq!(i.len(), 2, "fewer releases than the floor: no pruning");
        i.released();
        assert_eq!(i.len(), 1);
    }
}
