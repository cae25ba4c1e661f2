//! `nodegate completion SHELL` as a user runs it: a script on stdout that
//! completes every subcommand, and a refusal (exit status 2) for a shell it
//! does not know.

use std::process::Command;

fn nodegate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        .output()
        .expect("run nodegate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bash_completion_names_the_subcommands() {
    let (code, script, stderr) = nodegate(&["completion", "bash"]);
    assert_eq!(code, 0, "{stderr}");
    // The function bash calls, registered for the command name.
    assert!(
        script.contains("complete -F _nodegate") && script.contains("nodegate"),
        "not a bash completion script for nodegate:\n{script}"
    );
    for sub in ["run", "explain", "status", "backfill", "completion"] {
        assert!(
            script.contains(&format!("nodegate,{sub})")),
            "the bash script does not complete `nodegate {sub}`:\n{script}"
        );
    }
    // A flag of a subcommand, so the script goes below the top level.
    assert!(script.contains("--on-timeout"), "{script}");
}

#[test]
fn zsh_and_fish_scripts_are_printed() {
    for (shell, marker) in [
        ("zsh", "#compdef nodegate"),
        ("fish", "complete -c nodegate"),
    ] {
        let (code, script, stderr) = nodegate(&["completion", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        assert!(
            script.contains(marker),
            "{shell}: no {marker:?} in:\n{script}"
        );
        assert!(script.contains("explain"), "{shell}:\n{script}");
    }
}

#[test]
fn an_unknown_shell_is_refused_naming_it() {
    let (code, _, stderr) = nodegate(&["completion", "tcsh"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("tcsh"), "{stderr}");
}
