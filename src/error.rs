//! The binary's one error type, the one place its exit statuses are
//! defined, and how an error reads ([`Error::report`]): one line, the same
//! for every command; the two commonest failures (no kubeconfig, an API
//! server that does not answer) read as kubectl's do, with the fix.

use std::fmt;
use std::sync::OnceLock;

use crate::settings::config::ConfigError;

/// Exit status for a failure: the cluster could not be read, the HTTP port
/// could not be bound, the output could not be written, …
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a bad flag, value or config file (checked before anything
/// touches the cluster).
pub const EXIT_USAGE: u8 = 2;
/// Exit status of a check that ran and found problems (`doctor`, `config
/// check --cluster`): the setup is wrong, as opposed to "could not look"
/// ([`EXIT_FAILURE`]).
pub const EXIT_PROBLEMS: u8 = 3;

/// The cluster a command talks to, as a person names it: the API server's
/// URL and the kubeconfig context (none in a pod's in-cluster
/// configuration), so that an error can say which cluster did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub server: String,
    pub context: Option<String>,
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Records the cluster this process talks to; only the first call counts.
pub fn set_target(target: Target) {
    let _ = TARGET.set(target);
}

/// Where the kubeconfig a command reads comes from, for its error line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// `--kubeconfig`.
    Flag,
    /// `KUBECONFIG`, or `~/.kube/config` without it.
    Environment,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad flag, value or config file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Neither an in-cluster service account nor a usable kubeconfig.
    #[error("cannot find cluster credentials (in-cluster service account or KUBECONFIG)")]
    Credentials(#[source] kube::config::InferConfigError),
    /// A kubeconfig that cannot be used: missing, unreadable, not YAML, or
    /// without the context asked for.
    #[error("{}", kubeconfig_line(.source, *.from, .context.as_deref()))]
    Kubeconfig {
        source: kube::config::KubeconfigError,
        from: KubeconfigSource,
        /// `--context`, when given.
        context: Option<String>,
    },
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

    /// Something that cannot be used as it is ([`Error::Invalid`]).
    pub fn invalid(what: impl Into<String>, why: impl Into<String>) -> Error {
        let (what, why) = (what.into(), why.into());
        Error::Invalid { what, why }
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
            Error::Context { source, .. } => source.exit_code(),
            _ => EXIT_FAILURE,
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
        // The cluster's credentials or connection: one line of their own,
        // whatever step they stopped.
        let mut inner = self.0;
        while let Error::Context { source, .. } = inner {
            inner = source;
        }
        match inner {
            Error::Credentials(e) => return write!(f, "{}", credentials_line(e)),
            Error::Kubeconfig { .. } => return write!(f, "{inner}"),
            // A request that never reached the API server (connection
            // refused, no route, name not resolved, TLS refused, timed out).
            Error::Kube {
                source: source @ (kube::Error::HyperError(_) | kube::Error::Service(_)),
                ..
            } => return write!(f, "{}", unreachable_line(source)),
            _ => {}
        }
        let mut parts = vec![self.0.to_string()];
        for e in std::iter::successors(std::error::Error::source(self.0), |e| e.source()) {
            if let Some(k) = e.downcast_ref::<kube::Error>() {
                parts.push(kube_text(k));
                break;
            }
            parts.push(e.to_string());
        }
        write!(f, "{}", join_causes(parts))
    }
}

/// `parts` joined with `: `, each dropped when the one before already ends
/// with it (a library that prints its cause inside its own message).
fn join_causes(parts: Vec<String>) -> String {
    let mut out = String::new();
    for p in parts {
        let p = p.trim();
        if p.is_empty() || out.ends_with(p) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(p);
    }
    out
}

/// An I/O error as a person reads it: `no such file or directory`, not
/// `No such file or directory (os error 2)`.
fn io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    let mut chars = text.split(" (os error ").next().unwrap_or_default().chars();
    let first = chars.next().into_iter().flat_map(char::to_lowercase);
    first.chain(chars).collect()
}

/// The innermost cause of `e`: what actually went wrong, said once.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let last = std::iter::successors(Some(e), |e| e.source())
        .last()
        .unwrap_or(e);
    if let Some(io) = last.downcast_ref::<std::io::Error>() {
        return io_text(io);
    }
    // hyper-util's "tcp connect error" without its cause, or a timeout's
    // "deadline has elapsed".
    match last.to_string().as_str() {
        "deadline has elapsed" | "operation timed out" => "timed out".to_string(),
        text => text.to_string(),
    }
}

/// A failed API request as a person reads it: the server's answer (its
/// reason and message), or what stopped the request; never a Rust type.
pub fn kube_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => {
            let reason = match status.reason.as_str() {
                "" => format!("HTTP {}", status.code),
                r => r.to_string(),
            };
            match status.message.trim() {
                "" => reason,
                m => format!("{m} ({reason})"),
            }
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            format!("cannot reach the API server: {}", root_cause(e))
        }
        kube::Error::SerdeError(s) => format!("the API server's answer cannot be read: {s}"),
        other => root_cause(other),
    }
}

/// `cannot reach the API server URL (context "C"): CAUSE; FIX`.
fn unreachable_line(e: &kube::Error) -> String {
    let cause = root_cause(e);
    let fix = "check that the cluster is up and that this is its context (kubectl cluster-info)";
    let server = match TARGET.get() {
        Some(Target { server, context }) => match context {
            Some(ctx) => format!(" {server} (context {ctx:?})"),
            None => format!(" {server}"),
        },
        None => String::new(),
    };
    format!("cannot reach the API server{server}: {cause}; {fix}")
}

/// Neither a kubeconfig nor a pod's service account: what was looked for.
fn credentials_line(e: &kube::config::InferConfigError) -> String {
    match std::error::Error::source(e).and_then(|s| s.downcast_ref()) {
        Some(k) => kubeconfig_line(k, KubeconfigSource::Environment, None),
        None => "no kubeconfig and not in a cluster; set KUBECONFIG or pass --kubeconfig FILE"
            .to_string(),
    }
}

/// A kubeconfig that cannot be used, naming the file once, the cause once
/// and the fix.
fn kubeconfig_line(
    e: &kube::config::KubeconfigError,
    from: KubeconfigSource,
    context: Option<&str>,
) -> String {
    use kube::config::KubeconfigError as K;
    let (whence, fix) = match from {
        KubeconfigSource::Flag => ("--kubeconfig", "pass --kubeconfig a kubeconfig file"),
        KubeconfigSource::Environment => (
            "KUBECONFIG",
            "set KUBECONFIG or pass --kubeconfig FILE (in a pod: its service account)",
        ),
    };
    match e {
        K::ReadConfig(io, path) => format!(
            "cannot read the kubeconfig {} ({whence}): {}; {fix}",
            path.display(),
            io_text(io)
        ),
        K::FindPath => format!("no kubeconfig found (KUBECONFIG unset, no ~/.kube/config); {fix}"),
        K::Parse(p) => format!("the kubeconfig ({whence}) is not valid YAML: {p}"),
        K::LoadContext(name) => format!(
            "the kubeconfig ({whence}) has no context {name:?}; kubectl config get-contexts lists them"
        ),
        K::LoadClusterOfContext(name) => format!(
            "the kubeconfig ({whence}) has no cluster {name:?} for context {}; kubectl config get-contexts lists them",
            context.map_or("(current)".to_string(), |c| format!("{c:?}"))
        ),
        K::CurrentContextNotSet => format!(
            "the kubeconfig ({whence}) sets no current-context; pass --context NAME (kubectl config get-contexts lists them)"
        ),
        other => format!(
            "the kubeconfig ({whence}) cannot be used: {}",
            root_cause(other)
        ),
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
    fn a_missing_kubeconfig_is_one_line_naming_the_file_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let source = kube::config::KubeconfigError::ReadConfig(io, "/x/kc".into());
        let e = Error::context("cannot connect to the cluster")(Error::Kubeconfig {
            source,
            from: KubeconfigSource::Environment,
            context: None,
        });
        let line = e.report().to_string();
        assert_eq!(line.matches("/x/kc").count(), 1, "{line}");
        assert!(
            line.starts_with("cannot read the kubeconfig /x/kc (KUBECONFIG): "),
            "{line}"
        );
        assert!(
            !line.contains("cannot connect") && !line.contains('\''),
            "{line}"
        );
        assert_eq!(e.exit_code(), EXIT_FAILURE);
    }

    #[test]
    fn a_cause_said_twice_in_a_row_is_said_once() {
        let joined = join_causes(vec![
            "listing nodes".into(),
            "client error (Connect)".into(),
            "client error (Connect)".into(),
            "connection refused".into(),
        ]);
        assert_eq!(
            joined,
            "listing nodes: client error (Connect): connection refused"
        );
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
