//! The words every feature shares. With `rules` it is the floor: it imports
//! nothing above it (docs/architecture.md, "The core's folders").

pub mod annotations;
pub mod backoff;
pub mod budget;
pub mod config;
pub mod member;
pub mod model;
pub mod vec_map;
pub mod words;
pub mod write;
