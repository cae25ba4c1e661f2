//! The command line and the config file, merged into validated settings before
//! anything touches the cluster. Every setting is defined once, in `table`.

#[macro_use]
pub mod define;
pub mod cli;
pub mod config;
pub mod reload;
pub mod schema;
pub mod table;
