//! The binary's one error type, and the one place its exit statuses are
//! defined.
//!
//! This module owns [`Error`] (what a fallible path of any command or of
//! `main` reports: a bad setting, missing cluster credentials, a failed API
//! request, local I/O, an actor that would not start) and its exit status
//! ([`Error::exit_code`]: [`EXIT_USAGE`] for a bad setting, [`EXIT_FAILURE`]
//! for everything else). A variant's message is the text a user reads
//! today; the cause is kept as the error's `source`, and [`Error::report`]
//! prints the whole chain the way `anyhow`'s `{:#}` does (`message: cause:
//! cause's cause`). The settings' own validation error, [`ConfigError`], stays
//! in `settings::config` and is wrapped whole. This module decides nothing and
//! prints nothing: every command returns its error to `main`, which prints
//! it and exits with its status.

use std::fmt;

use crate::settings::config::ConfigError;

/// Exit status for a failure: the cluster could not be read, the HTTP port
/// could not be bound, the output could not be written, …
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a bad flag, value or config file (checked before anything
/// touches the cluster).
pub const EXIT_USAGE: u8 = 2;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad flag, value or config file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Neither an in-cluster service account nor a usable kubeconfig.
    #[error("cannot find cluster credentials (in-cluster service account or KUBECONFIG)")]
    Credentials(#[source] kube::config::InferConfigError),
    /// Credentials found, but no client could be built from them.
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
    /// A request to the API server failed; `what` says which (e.g. "listing
    /// nodes").
    #[error("{what}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Local I/O: the HTTP listener, the runtime, stdout; `what` says which.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The gate supervisor actor could not be spawned.
    #[error("cannot start the gate supervisor")]
    Supervisor(#[source] ractor::SpawnErr),
    /// `nodegate explain` was asked about a node the cluster does not have.
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// Something read or produced that cannot be used as it is: `what` names
    /// it, `why` says what is wrong with it.
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
    /// Another error, said of the step it stopped (e.g. "cannot connect to
    /// the cluster"); it exits with that error's status.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// A failed API request, saying what was asked: `.map_err(Error::kube("listing nodes"))`.
    pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }

    /// An error of this type, said of the step it stopped:
    /// `.map_err(Error::context("cannot connect to the cluster"))`.
    pub fn context(what: impl Into<String>) -> impl FnOnce(Error) -> Error {
        let what = what.into();
        move |source| Error::Context {
            what,
            source: Box::new(source),
        }
    }

    /// A failed local I/O operation, saying what it was.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// The process's exit status when this error ends it.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) => EXIT_USAGE,
            Error::Credentials(_)
            | Error::Client(_)
            | Error::Kube { .. }
            | Error::Io { .. }
            | Error::Supervisor(_)
            | Error::NodeNotFound(_)
            | Error::Invalid { .. } => EXIT_FAILURE,
            Error::Context { source, .. } => source.exit_code(),
        }
    }

    /// The message followed by every cause, `: `-separated (what `anyhow`
    /// prints for `{:#}`), for a person to read.
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }
}

/// [`Error::report`]: the error and its causes on one line.
pub struct Report<'a>(&'a Error);

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(self.0);
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_report_chains_every_cause_like_anyhow() {
        // What `anyhow::Error::new(io).context(what)` printed with `{:#}`.
        let io = std::io::Error::other(Outer(std::io::Error::other("inner")));
        let e = Error::io("cannot listen on 127.0.0.1:1 (--http-addr)")(io);
        assert_eq!(e.to_string(), "cannot listen on 127.0.0.1:1 (--http-addr)");
        assert_eq!(
            e.report().to_string(),
            "cannot listen on 127.0.0.1:1 (--http-addr): outer: inner"
        );
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
    }

    #[test]
    fn a_bad_setting_exits_2_and_reads_as_before() {
        let e =
            Error::from(crate::settings::config::parse_duration("--timeout", "soon").unwrap_err());
        assert_eq!(e.exit_code(), EXIT_USAGE);
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert_eq!(e.report().to_string(), e.to_string());
        assert!(e.to_string().starts_with("--timeout \"soon\": "), "{e}");
    }

    #[test]
    fn a_context_reads_before_the_whole_report_and_keeps_the_exit_status() {
        let inner =
            Error::from(crate::settings::config::parse_duration("--timeout", "soon").unwrap_err());
        let expected = format!("cannot connect to the cluster: {}", inner.report());
        let e = Error::context("cannot connect to the cluster")(inner);
        assert_eq!(e.report().to_string(), expected);
        assert_eq!(e.exit_code(), EXIT_USAGE);
    }
}
