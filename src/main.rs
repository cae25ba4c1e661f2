//! The `nodegate` binary: parses the command line, validates `run`'s
//! settings (exit status 2 on a bad value, before touching the cluster; the
//! `explain` and `status` commands validate their own) and hands over to the
//! command. Wiring only; behaviour lives in the modules, exit statuses in
//! `nodegate::error`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use nodegate::Error;
use nodegate::commands::{backfill, completion, explain, run, status};
use nodegate::settings::cli::{Cli, Command, LogFormat};
use nodegate::settings::config;

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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = Error::io("cannot start the async runtime")(e);
            eprintln!("error: {}", e.report());
            return ExitCode::from(e.exit_code());
        }
    };
    match cli.command {
        Command::Run(args) => {
            let settings = match config::run_settings(&args) {
                Ok(s) => s,
                Err(e) => {
                    let e = Error::from(e);
                    eprintln!("error: {}", e.report());
                    return ExitCode::from(e.exit_code());
                }
            };
            init_tracing(settings.log_format, &settings.log_level);
            match runtime.block_on(run::run(*args, settings)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{}", e.report());
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::Explain(args) => runtime.block_on(explain::main(args)),
        Command::Status(args) => runtime.block_on(status::main(args)),
        Command::Backfill(args) => runtime.block_on(backfill::main(args)),
        Command::Completion(args) => completion::main(args),
    }
}
