//! The `nodegate` binary: wires the CLI to the gate.

use clap::Parser;

mod cli;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    eprintln!("nodegate: {:?} is not wired up yet", cli.command);
    std::process::ExitCode::from(2)
}
