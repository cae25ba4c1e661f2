//! nodegate's pure core: every decision nodegate makes, as plain functions
//! over plain data, and nothing that does I/O, awaits or reads the clock
//! (time is always an argument; the Cargo.toml keeps async runtimes, actor
//! frameworks and Kubernetes clients out). It is built in floors. At the
//! bottom, the vocabulary every feature shares: the node's `model` with its
//! marks, the `annotations` it carries, the `config` with each feature's
//! settings, `member`s and a `budget`. Above it, the rules that vocabulary is
//! written in (`placement`, `selector`, `readiness`, `startup`, `conditions`,
//! `devices`). On top, the controllers: each node's `gate` and its
//! `journal`, the `deciders` beside it with their rules (`entrance`,
//! `regate`, `reboot`, `replace`, `canary`), and `report`, a gate explained
//! to a person. Nothing imports upward, and `tests/module_graph.rs` keeps it
//! so. `testutil`, builders for tests, exists only in tests and under the
//! cargo feature `testing`, which only dev-dependencies turn on.

pub mod canary;
pub mod closing;
pub mod deciders;
pub mod gate;
pub mod net;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
pub mod testutil;
pub mod vocab;
