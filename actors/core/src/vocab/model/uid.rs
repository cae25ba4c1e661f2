//! A pod's uid in 16 bytes: every replica holds every DaemonSet pod
//! (docs/benchmarks.md, "65,000 open nodes"), and a UUID's 36 characters took
//! an allocation (52 bytes) a pod. A canonical UUID (as the API server writes
//! it) is held as its 128 bits, any other text exactly, in a shared string:
//! nothing is refused, rewritten or confused with another uid.

use std::fmt;
use std::num::NonZeroU64;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use super::Shared;

/// An object's uid, as the API server wrote it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Uid(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// A UUID in its canonical text. The low half of the API server's
    /// (RFC 4122 variant) is never zero; a UUID whose low half is zero is
    /// kept as text, which lets `lo` give the other variant its tag.
    Uuid { hi: u64, lo: NonZeroU64 },
    /// Anything else, exactly as written (the empty uid among them).
    Text(Shared),
}

/// The length of a UUID's canonical text.
const UUID_LEN: usize = 36;

impl Uid {
    /// The uid written `s`.
    pub fn new(s: &str) -> Self {
        Uid(Self::uuid(s).unwrap_or_else(|| Repr::Text(Shared::from(s))))
    }

    /// `s` as a [`Repr::Uuid`], when it is a UUID's canonical text (and so
    /// is written back exactly) with a non-zero low half.
    fn uuid(s: &str) -> Option<Repr> {
        if s.len() != UUID_LEN {
            return None;
        }
        let u = Uuid::try_parse(s).ok()?;
        let mut buf = [0u8; UUID_LEN];
        if u.hyphenated().encode_lower(&mut buf) != s {
            return None;
        }
        let (hi, lo) = u.as_u64_pair();
        Some(Repr::Uuid {
            hi,
            lo: NonZeroU64::new(lo)?,
        })
    }

    /// The uid's text, without allocating.
    pub fn text(&self) -> UidText<'_> {
        match &self.0 {
            Repr::Uuid { hi, lo } => {
                let mut buf = [0u8; UUID_LEN];
                Uuid::from_u64_pair(*hi, lo.get())
                    .hyphenated()
                    .encode_lower(&mut buf);
                UidText::Uuid(buf)
            }
            Repr::Text(s) => UidText::Text(s),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Text(s) if s.is_empty())
    }

    /// Whether the uid is held as text (it is not a canonical UUID): only
    /// then do two copies of it cost two allocations.
    pub fn is_text(&self) -> bool {
        matches!(self.0, Repr::Text(_))
    }
}

impl Default for Uid {
    fn default() -> Self {
        Uid(Repr::Text(Shared::default()))
    }
}

/// A [`Uid`]'s text: reads as a `&str`.
pub enum UidText<'a> {
    Uuid([u8; UUID_LEN]),
    Text(&'a str),
}

impl Deref for UidText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            // Written by `encode_lower`: ASCII hex digits and hyphens.
            UidText::Uuid(buf) => std::str::from_utf8(buf).unwrap_or_default(),
            UidText::Text(s) => s,
        }
    }
}

impl<T: AsRef<str>> From<T> for Uid {
    fn from(s: T) -> Self {
        Uid::new(s.as_ref())
    }
}

impl From<&Uid> for Uid {
    fn from(u: &Uid) -> Self {
        u.clone()
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// As the text's: a pod's `Debug` reads as before.
impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text(), f)
    }
}

impl<T: AsRef<str> + ?Sized> PartialEq<T> for Uid {
    fn eq(&self, other: &T) -> bool {
        *self.text() == *other.as_ref()
    }
}

text_eq!(reversed Uid: str, &str, String);

impl Serialize for Uid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Uid::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "6f1c9a2e-4b7d-4e21-9c3a-0d5e8f7a1b24";

    #[test]
    fn a_uid_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Uid>(), 16);
    }

    #[test]
    fn a_canonical_uuid_is_held_as_its_bits_and_written_back_exactly() {
        let u = Uid::from(UUID);
        assert!(!u.is_text());
        assert_eq!(&*u.text(), UUID);
        assert_eq!(u.to_string(), UUID);
        assert_eq!(format!("{u:?}"), format!("{UUID:?}"));
        assert_eq!(u, UUID);
        assert_eq!(u, Uid::from(UUID.to_string()));
        assert_ne!(u, Uid::from("6f1c9a2e-4b7d-4e21-9c3a-0d5e8f7a1b25"));
    }

    #[test]
    fn any_other_text_is_kept_exactly_and_never_equals_a_uuid_of_another_text() {
        let upper = UUID.to_uppercase();
        for text in [
            "",
            "uid-cilium-1",
            upper.as_str(),
            "6f1c9a2e4b7d4e219c3a0d5e8f7a1b24",
            "{6f1c9a2e-4b7d-4e21-9c3a-0d5e8f7a1b24}",
            "urn:uuid:6f1c9a2e-4b7d-4e21-9c3a-0d5e8f7a1b24",
            "00000000-0000-0000-0000-000000000000",
            "6f1c9a2e-4b7d-4e21-0000-000000000000",
            "6f1c9a2e-4b7d-4e21-9c3a-0d5e8f7a1b2x",
            "ünïcödé-and-then-some-text-of-36-b",
        ] {
            let u = Uid::from(text);
            assert!(u.is_text(), "{text:?}");
            assert_eq!(&*u.text(), text);
            assert_eq!(u, text);
            assert_ne!(u, Uid::from(UUID), "{text:?}");
        }
        assert!(Uid::from("").is_empty() && Uid::default().is_empty());
        assert!(!Uid::from(UUID).is_empty());
    }

    #[test]
    fn it_serializes_as_its_text() {
        for text in [UUID, "uid-a", ""] {
            let json = serde_json::to_string(&Uid::from(text)).ok();
            assert_eq!(json, serde_json::to_string(text).ok());
            let back: Option<Uid> = json.and_then(|j| serde_json::from_str(&j).ok());
            assert_eq!(back, Some(Uid::from(text)));
        }
    }

    #[test]
    fn equal_texts_hash_alike() {
        use std::collections::HashSet;
        let set: HashSet<Uid> = [UUID, "a"].into_iter().map(Uid::from).collect();
        assert!(set.contains(&Uid::from(UUID.to_string())));
        assert!(set.contains(&Uid::from("a")));
        assert!(!set.contains(&Uid::from("b")));
    }
}
