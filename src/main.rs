//! The `nodegate` binary, wiring only: parses the command line, validates
//! `run`'s settings (exit status 2, before touching the cluster) and hands
//! over to the command; [`exit`] prints the error a command returns.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use nodegate::cluster::client::set_process_connection;
use nodegate::commands::{
    backfill, completion, config_check, doctor, explain, output, probe, run, status, uninstall,
    version,
};
use nodegate::settings::cli::{Cli, ClusterArgs, Command, ConfigCommand, LogFormat, RunArgs};
use nodegate::settings::config;
use nodegate::{Error, Result};

/// The heap allocator, chosen by measurement (nodegate-alloc;
/// docs/benchmarks.md, "The allocator").
#[global_allocator]
static GLOBAL: nodegate_alloc::Allocator = nodegate_alloc::Allocator;

fn init_tracing(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(config::log_filter(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: a log file or a collector
    // would get escape codes in every line.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}

fn file_stem(argv0: Option<&std::ffi::OsStr>) -> Option<&str> {
    std::path::Path::new(argv0?).file_stem()?.to_str()
}

/// The command line with its dynamic completion candidates attached here,
/// so that its definition (`settings::cli`) imports no command: the node
/// names `explain NODE` completes to.
fn command() -> clap::Command {
    Cli::command().mut_subcommand("explain", |explain| {
        explain.mut_arg("node", |node| {
            node.add(clap_complete::ArgValueCandidates::new(
                completion::node_candidates,
            ))
        })
    })
}

fn parse() -> Cli {
    let argv0 = std::env::args_os().next();
    // Dynamic completion (`COMPLETE=bash nodegate`): answers and exits;
    // without the variable it returns at once.
    clap_complete::CompleteEnv::with_factory(command).complete();
    // The usage lines say `kubectl nodegate` when run as the kubectl plugin
    // (`kubectl-nodegate` on the PATH).
    let name = match file_stem(argv0.as_deref()) {
        Some("kubectl-nodegate") => "kubectl nodegate",
        _ => "nodegate",
    };
    let matches = command().bin_name(name).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Gives each command the connection flags given before the subcommand,
/// where it has none of its own; `run`'s become the process's connection.
fn connect_flags(mut cli: Cli) -> Result<Command> {
    let outer: &ClusterArgs = &cli.cluster;
    let mut process = outer.clone();
    match &mut cli.command {
        Command::Explain(a) => a.cluster = a.cluster.or(outer),
        Command::Status(a) => a.cluster = a.cluster.or(outer),
        Command::Backfill(a) => a.cluster = a.cluster.or(outer),
        Command::Uninstall(a) => a.cluster = a.cluster.or(outer),
        Command::Version(a) => a.cluster = a.cluster.or(outer),
        Command::Config(ConfigCommand::Check(a)) => a.cluster = a.cluster.or(outer),
        Command::Doctor(a) => a.run.cluster = a.run.cluster.or(outer),
        Command::Run(a) => {
            a.cluster = a.cluster.or(outer);
            process = a.cluster.clone();
        }
        Command::Completion(_) | Command::Probe(_) => {}
    }
    set_process_connection(output::connection(&process)?);
    Ok(cli.command)
}

/// Whether `--FLAG` was given on this process's command line.
fn given_on_the_command_line(flag: &str) -> bool {
    let long = format!("--{flag}");
    std::env::args_os().any(|a| {
        a.to_str()
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    })
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // kubectl's completion helper for the plugin.
    if file_stem(args.first().map(|a| a.as_os_str())) == Some("kubectl_complete-nodegate") {
        return exit(completion::kubectl_complete(command(), &args[1..]), false);
    }
    let cli = parse();
    // The container's probe, run every few seconds: no runtime, no cluster.
    if let Command::Probe(args) = &cli.command {
        return probe::main(args.clone());
    }
    // Before the runtime starts its threads. The controller, long-lived,
    // runs with the allocator's tunables (it may start itself again here).
    if matches!(cli.command, Command::Run(_)) {
        nodegate_alloc::restart_with_tunables();
    }
    nodegate_alloc::init();
    let command = match connect_flags(cli) {
        Ok(c) => c,
        Err(e) => return exit(Err(e), false),
    };
    let result = match command {
        Command::Run(args) => return run_command(*args),
        Command::Explain(args) => block_on(explain::main(args)),
        Command::Status(args) => block_on(status::main(args)),
        Command::Backfill(args) => block_on(backfill::main(args)),
        Command::Uninstall(args) => block_on(uninstall::main(args)),
        Command::Version(args) => block_on(version::main(args)),
        Command::Completion(args) => completion::main(args),
        Command::Probe(args) => Ok(probe::main(args)),
        Command::Config(ConfigCommand::Check(args)) => block_on(config_check::main(args)),
        Command::Doctor(args) => block_on(doctor::main(*args)),
    };
    exit(result, false)
}

/// `nodegate run`: its settings first, since they size its runtime
/// (`--worker-threads`); a refused start gets one worker, enough to forget
/// what its earlier run wrote.
fn run_command(args: RunArgs) -> ExitCode {
    let settings = config::run_settings(&args);
    let workers = settings.as_ref().map_or(1, |s| s.given.worker_threads);
    let runtime = match runtime(workers) {
        Ok(rt) => rt,
        Err(e) => return exit(Err(e), false),
    };
    let mut logging = false;
    let result = settings
        .map_err(|e| {
            // A refused start crash-loops the pod: what its earlier
            // run wrote must not keep the admission policy tainting.
            runtime.block_on(run::forget_on_refusal(&args));
            config::check::said_of_the_file(&args, e, given_on_the_command_line)
        })
        .map_err(Error::from)
        .and_then(|settings| {
            init_tracing(settings.given.log_format, &settings.log_level);
            logging = true;
            runtime.block_on(run::run(args, settings))
        })
        .map(|()| ExitCode::SUCCESS);
    exit(result, logging)
}

/// A command other than `run`, on the default runtime.
fn block_on<T>(command: impl Future<Output = Result<T>>) -> Result<T> {
    runtime(0)?.block_on(command)
}

/// The async runtime, with `workers` worker threads (0: tokio's choice, one
/// per CPU the process may use).
fn runtime(workers: usize) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if workers > 0 {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .build()
        .map_err(Error::io("cannot start the async runtime"))
}

/// The one place a command's error is printed: as a log line once `run` has
/// set up logging (`logging`), else on stderr as `error: message: cause: …`.
fn exit(result: Result<ExitCode>, logging: bool) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            if logging {
                tracing::error!("{}", e.report());
            } else {
                eprintln!("error: {}", e.report());
            }
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_has_the_workers_asked_for() {
        for workers in [1, 3] {
            let runtime = runtime(workers).expect("a runtime");
            assert_eq!(runtime.metrics().num_workers(), workers);
        }
        // 0 is tokio's choice, which this variable would override.
        if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let runtime = runtime(0).expect("a runtime");
            assert_eq!(runtime.metrics().num_workers(), cpus);
        }
    }

    #[test]
    fn main_attaches_the_node_names_to_explain() {
        let command = command();
        command.clone().debug_assert();
        let explain = command
            .find_subcommand("explain")
            .expect("an explain subcommand");
        let node = explain
            .get_arguments()
            .find(|a| a.get_id() == "node")
            .expect("explain's node argument");
        assert!(
            node.get::<clap_complete::ArgValueCandidates>().is_some(),
            "explain NODE completes to the node names"
        );
    }
}
