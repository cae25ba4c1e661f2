//! The `nodegate` binary: parses the command line, validates `run`'s
//! settings (exit status 2 on a bad value, before touching the cluster; the
//! other commands validate their own) and hands over to the command. Every
//! command returns its exit status or its error here, and [`exit`] prints
//! the error. Wiring only; behaviour lives in the modules, exit statuses in
//! `nodegate::error`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use nodegate::commands::{backfill, completion, explain, run, status};
use nodegate::settings::cli::{Cli, Command, LogFormat};
use nodegate::settings::config;
use nodegate::{Error, Result};

fn init_tracing(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut logging = false;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return exit(Err(Error::io("cannot start the async runtime")(e)), logging),
    };
    let result = match cli.command {
        Command::Run(args) => config::run_settings(&args)
            .map_err(Error::from)
            .and_then(|settings| {
                init_tracing(settings.log_format, &settings.log_level);
                logging = true;
                runtime.block_on(run::run(*args, settings))
            })
            .map(|()| ExitCode::SUCCESS),
        Command::Explain(args) => runtime.block_on(explain::main(args)),
        Command::Status(args) => runtime.block_on(status::main(args)),
        Command::Backfill(args) => runtime.block_on(backfill::main(args)),
        Command::Completion(args) => completion::main(args),
    };
    exit(result, logging)
}

/// The one place a command's error is printed: as a log line once `run` has
/// set up logging (`logging`), else on stderr as `error: message: cause: …`.
/// The exit status is the command's own, or the error's.
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
