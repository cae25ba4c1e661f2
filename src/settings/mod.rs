//! The command line (`cli`) and the config file (`config`), validated and
//! merged into settings before anything touches the cluster.

pub mod cli;
pub mod config;
