//! `nodegate completion bash|zsh|fish`: the shell completion script for every
//! subcommand and flag, generated from the command line's own definition
//! (`settings::cli`), so it never falls behind a new flag. It prints on
//! stdout and touches nothing else.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::error::{Error, Result};
use crate::settings::cli::{Cli, CompletionArgs, CompletionShell};

/// The name the script completes: the one a user types.
const BIN_NAME: &str = "nodegate";

pub fn main(args: CompletionArgs) -> Result<ExitCode> {
    let mut out = Vec::new();
    script(args.shell, &mut out);
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&out).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed pipe (`nodegate completion bash | head`) is the reader's
        // choice, not a failure worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(Error::io("cannot write the completion script to stdout")(e)),
    }
}

/// Writes the completion script for `shell` into `out`.
pub fn script(shell: CompletionShell, out: &mut Vec<u8>) {
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(shell: CompletionShell) -> String {
        let mut out = Vec::new();
        script(shell, &mut out);
        String::from_utf8(out).expect("completion scripts are UTF-8")
    }

    #[test]
    fn every_shell_names_every_subcommand_and_a_run_flag() {
        for shell in [
            CompletionShell::Bash,
            CompletionShell::Zsh,
            CompletionShell::Fish,
        ] {
            let t = text(shell);
            for word in [
                "run",
                "explain",
                "status",
                "backfill",
                "completion",
                "on-timeout",
            ] {
                assert!(t.contains(word), "{shell:?} script lacks {word:?}:\n{t}");
            }
        }
    }
}
