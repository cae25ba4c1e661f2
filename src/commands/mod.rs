//! The commands a user runs: `nodegate run` (the controller), `nodegate
//! explain NODE` and `nodegate status`. Each reasons through the gate core;
//! none has rules of its own.

pub mod explain;
pub mod run;
pub mod status;
