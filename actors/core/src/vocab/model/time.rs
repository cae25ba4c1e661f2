//! An optional time in three 4-byte words, for `PodInfo::ready_since`: an
//! `Option<Timestamp>` takes 24 bytes (a `Timestamp` has no spare value for
//! `None`). Every time jiff can hold fits exactly, and with the pod's four
//! flags the pair takes 16 bytes instead of 32 (docs/benchmarks.md, "65,000 open nodes").

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `Option<Timestamp>`, compact. Compares, prints and serializes as the
/// `Option<Timestamp>` it holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptTime {
    /// The seconds since the Unix epoch, high and low halves.
    hi: i32,
    lo: u32,
    /// The fraction's nanoseconds (an `i32` between -10⁹ and 10⁹ as jiff
    /// gives it, its bits as a `u32`), or [`NONE`].
    nanos: u32,
}

/// `nanos` of an absent time: no fraction is a whole second.
const NONE: u32 = 1_000_000_000;

impl OptTime {
    pub const NONE: OptTime = OptTime {
        hi: 0,
        lo: 0,
        nanos: NONE,
    };

    /// The time held, if any.
    pub fn get(self) -> Option<Timestamp> {
        if self.nanos == NONE {
            return None;
        }
        let secs = (i64::from(self.hi) << 32) | i64::from(self.lo);
        // Only `From<Timestamp>` writes a time, so this always succeeds.
        Timestamp::new(secs, self.nanos as i32).ok()
    }

    pub fn is_some(self) -> bool {
        self.nanos != NONE
    }
}

impl Default for OptTime {
    fn default() -> Self {
        OptTime::NONE
    }
}

impl From<Timestamp> for OptTime {
    fn from(t: Timestamp) -> Self {
        let secs = t.as_second();
        OptTime {
            hi: (secs >> 32) as i32,
            lo: secs as u32,
            // Jiff's fraction has the seconds' sign: its bits as written.
            nanos: t.subsec_nanosecond() as u32,
        }
    }
}

impl From<Option<Timestamp>> for OptTime {
    fn from(t: Option<Timestamp>) -> Self {
        t.map_or(OptTime::NONE, OptTime::from)
    }
}

impl From<OptTime> for Option<Timestamp> {
    fn from(t: OptTime) -> Self {
        t.get()
    }
}

impl PartialEq<Option<Timestamp>> for OptTime {
    fn eq(&self, other: &Option<Timestamp>) -> bool {
        self.get() == *other
    }
}

impl fmt::Debug for OptTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

impl Serialize for OptTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for OptTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<Timestamp>::deserialize(d).map(OptTime::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_12_bytes_and_holds_every_time_exactly() {
        assert_eq!(std::mem::size_of::<OptTime>(), 12);
        assert_eq!(OptTime::default().get(), None);
        assert_eq!(OptTime::from(None), OptTime::NONE);
        let times = [
            Ok(Timestamp::MIN),
            Ok(Timestamp::MAX),
            Ok(Timestamp::UNIX_EPOCH),
            Timestamp::new(1_795_000_000, 0),
            Timestamp::new(1_795_000_000, 999_999_999),
            Timestamp::new(-1, 0),
            Timestamp::new(-1, -1),
            Timestamp::new(-62_135_596_800, 0),
            Timestamp::new(0, 1),
        ];
        for t in times {
            let Ok(t) = t else {
                panic!("a test time is out of jiff's range: {t:?}")
            };
            let held = OptTime::from(t);
            assert!(held.is_some());
            assert_eq!(held.get(), Some(t), "{t}");
            assert_eq!(held, Some(t));
            assert_eq!(format!("{held:?}"), format!("{:?}", Some(t)));
        }
    }

    #[test]
    fn it_serializes_as_an_optional_time() {
        for t in [None, Some(Timestamp::new(1_795_000_000, 5))] {
            let Ok(t) = t.transpose() else {
                panic!("a test time is out of range")
            };
            let json = serde_json::to_string(&OptTime::from(t)).ok();
            assert_eq!(json, serde_json::to_string(&t).ok());
            let back: Option<OptTime> = json.and_then(|j| serde_json::from_str(&j).ok());
            assert_eq!(back, Some(OptTime::from(t)));
        }
    }
}
