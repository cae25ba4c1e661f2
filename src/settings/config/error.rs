//! [`ConfigError`], a leaf: the settings, the trace exporter's
//! configuration, the client's connection flags and the commands all
//! return it, and it imports none of them.

/// A bad value in the settings, named with where it came from; the process
/// exits with status 2 on any of them (see `crate::error`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_}: {message}")]
    Invalid { source_: String, message: String },
    #[error("cannot read config file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("config file {path}: {err}")]
    Parse { path: String, err: String },
}
