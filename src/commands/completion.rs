//! `nodegate completion bash|zsh|fish`: the shell completion script,
//! generated from the command line's own definition (`settings::cli`), so
//! it never falls behind a new flag. Node names (`nodegate explain <TAB>`)
//! need the cluster, so a static script cannot offer them: the binary itself
//! answers each TAB ([`node_candidates`]), through clap_complete's dynamic
//! completion (`COMPLETE=bash nodegate`) or, linked as
//! `kubectl_complete-nodegate`, through [`kubectl_complete`].

use std::process::ExitCode;

use std::ffi::OsString;
use std::time::Duration;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_complete::engine::CompletionCandidate;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

use crate::commands::output;
use crate::error::{Error, Result};
use crate::settings::cli::{Cli, CompletionArgs, CompletionShell};

/// The name the script completes: the one a user types.
const BIN_NAME: &str = "nodegate";

pub fn main(args: CompletionArgs) -> Result<ExitCode> {
    let mut out = Vec::new();
    script(args.shell, &mut out);
    output::print(&out, "cannot write the completion script to stdout")?;
    Ok(ExitCode::SUCCESS)
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

/// How long a TAB waits for the node names.
const NODES_WAIT: Duration = Duration::from_secs(3);

/// The cluster's node names, for `explain NODE`; none when the cluster
/// cannot be read in time (a completion must never print an error).
pub fn node_candidates() -> Vec<CompletionCandidate> {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let names = runtime.block_on(async {
        let list = async {
            let client = crate::cluster::client::client().await.ok()?;
            let nodes: Api<Node> = Api::all(client);
            nodes.list_metadata(&ListParams::default()).await.ok()
        };
        tokio::time::timeout(NODES_WAIT, list).await.ok().flatten()
    });
    names
        .into_iter()
        .flat_map(|l| l.items)
        .filter_map(|n| n.metadata.name)
        .map(CompletionCandidate::new)
        .collect()
}

/// cobra's ShellCompDirectiveNoFileComp: offer no file names.
const NO_FILE_COMPLETION: u8 = 4;

/// `kubectl_complete-nodegate __complete ARGS… PARTIAL`, as kubectl runs it
/// for `kubectl nodegate ARGS… PARTIAL<TAB>`: the candidates (`value\thelp`)
/// one a line, then `:4`, cobra's protocol. `command` is the command line
/// with its candidates attached (`main`'s).
pub fn kubectl_complete(mut command: clap::Command, args: &[OsString]) -> Result<ExitCode> {
    let words = match args.first() {
        Some(first) if first == "__complete" || first == "__completeNoDesc" => &args[1..],
        _ => args,
    };
    let mut argv: Vec<OsString> = vec![BIN_NAME.into()];
    argv.extend(words.iter().cloned());
    if words.is_empty() {
        argv.push(OsString::new());
    }
    let index = argv.len() - 1;
    let cwd = std::env::current_dir().ok();
    let candidates = clap_complete::engine::complete(&mut command, argv, index, cwd.as_deref())
        .map_err(Error::io("cannot complete"))?;
    let mut out = String::new();
    for c in candidates.iter().filter(|c| !c.is_hide_set()) {
        out.push_str(&c.get_value().to_string_lossy());
        if let Some(help) = c.get_help().map(ToString::to_string) {
            out.push_str(&format!("\t{}", help.lines().next().unwrap_or_default()));
        }
        out.push('\n');
    }
    out.push_str(&format!(":{NO_FILE_COMPLETION}\n"));
    output::print(out.as_bytes(), "cannot write the completions to stdout")?;
    Ok(ExitCode::SUCCESS)
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
                "doctor",
                "from-cluster",
                "on-timeout",
            ] {
                assert!(t.contains(word), "{shell:?} script lacks {word:?}:\n{t}");
            }
        }
    }
}
