//! nodegate's pure core: every decision nodegate makes, as plain functions
//! over plain data; nothing here does I/O, awaits or reads the clock (time
//! is always an argument). Its folders and floors: docs/architecture.md,
//! "The core's folders".

pub mod canary;
pub mod closing;
pub mod deciders;
pub mod gate;
pub mod net;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
#[path = "tests/testutil.rs"]
pub mod testutil;
pub mod vocab;
