//! The command line (`cli`) and the config file (`config`), validated and
//! merged into settings before anything touches the cluster, and what a
//! reload of the config file would change (`reload`). Every setting is
//! defined once, in `table` (the machinery is in `define`).

#[macro_use]
pub mod define;
pub mod cli;
pub mod config;
pub mod reload;
pub mod schema;
pub mod table;
