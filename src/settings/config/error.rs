//! [`ConfigError`], a leaf importing none of the settings, the trace
//! exporter's configuration, the client's flags and the commands that return it.

/// A bad value in the settings, named with where it came from; met at start,
/// the process exits with status 2 (see `crate::error`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_}: {message}")]
    Invalid { source_: String, message: String },
    #[error("cannot read config file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("config file {path}: {err}")]
    Parse { path: String, err: String },
}
