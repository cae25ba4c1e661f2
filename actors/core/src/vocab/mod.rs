//! The vocabulary every feature shares: the node's `model` (with its marks
//! and the interner in `model/shared`), the `annotations` nodegate reads and
//! writes, the `config` with every feature's settings, gate `member`s, a
//! `budget`, the one `backoff` policy, the small sorted map (`vec_map`) the
//! gate keeps its sets in, every `write` nodegate makes with its one
//! outcome, and `words`, the enums that stand for fixed words.
//! Together with `rules` it is the floor: it imports nothing above it.

pub mod annotations;
pub mod backoff;
pub mod budget;
pub mod config;
pub mod member;
pub mod model;
pub mod vec_map;
pub mod words;
pub mod write;
