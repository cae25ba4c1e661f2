//! What a kubectl or shell user installs: `nodegate completion SHELL` (a
//! script on stdout that completes every subcommand; a refusal, exit status
//! 2, for a shell it does not know), and the Krew manifest
//! deploy/krew/nodegate.yaml as deploy/krew/render fills it in for a release
//! from the release's archives, installed the way Krew installs it.

use std::path::{Path, PathBuf};
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

/// This clone, read when the test runs (the build cache is shared between
/// clones, so the compile-time path may name another one).
fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256(path: &Path) -> String {
    run(Command::new("sha256sum").arg(path))
        .split_whitespace()
        .next()
        .expect("sha256sum prints the digest first")
        .to_string()
}

const PLATFORMS: [&str; 4] = ["linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"];

#[test]
fn krew_manifest_renders_for_a_release_and_installs_as_kubectl_nodegate() {
    // A release's archives, `nodegate` at the top level of each: for
    // linux/amd64 (installed below) a script that runs the real binary (the
    // debug binary itself is too big to pack in a test), a stand-in for the
    // others (only their digests matter); each different, so that a digest
    // put in the wrong place shows.
    let dir = tempfile::tempdir().expect("temp dir");
    let stage = dir.path().join("stage");
    let dist = dir.path().join("dist");
    std::fs::create_dir_all(&stage).expect("mkdir stage");
    std::fs::create_dir_all(&dist).expect("mkdir dist");
    for p in PLATFORMS {
        let binary = stage.join("nodegate");
        let text = if p == "linux-amd64" {
            format!(
                "#!/bin/sh\nexec '{}' \"$@\"\n",
                env!("CARGO_BIN_EXE_nodegate")
            )
        } else {
            format!("nodegate for {p}")
        };
        std::fs::write(&binary, text).expect("write nodegate");
        std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod nodegate");
        std::fs::write(stage.join("README"), format!("nodegate 0.2.0, {p}")).expect("write");
        run(Command::new("tar")
            .arg("-czf")
            .arg(dist.join(format!("nodegate-0.2.0-{p}.tar.gz")))
            .arg("-C")
            .arg(&stage)
            .args(["nodegate", "README"]));
    }
    let base = "https://downloads.example.invalid/nodegate/v0.2.0";
    let rendered = run(Command::new(repo().join("deploy/krew/render"))
        .args(["0.2.0", base])
        .arg(&dist));
    assert!(
        !rendered.contains('@'),
        "placeholders left in the rendered manifest:\n{rendered}"
    );
    let m: serde_json::Value =
        serde_saphyr::from_str(&rendered).expect("rendered manifest is YAML");
    assert_eq!(m["kind"].as_str(), Some("Plugin"));
    assert_eq!(
        m["apiVersion"].as_str(),
        Some("krew.googlecontainertools.github.com/v1alpha2")
    );
    assert_eq!(m["metadata"]["name"].as_str(), Some("nodegate"));
    assert_eq!(m["spec"]["version"].as_str(), Some("v0.2.0"));
    let platforms = m["spec"]["platforms"].as_array().expect("platforms");
    assert_eq!(platforms.len(), PLATFORMS.len());
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        let name = format!(
            "{}-{}",
            labels["os"].as_str().expect("os"),
            labels["arch"].as_str().expect("arch")
        );
        let archive = dist.join(format!("nodegate-0.2.0-{name}.tar.gz"));
        assert_eq!(
            p["uri"].as_str(),
            Some(format!("{base}/nodegate-0.2.0-{name}.tar.gz").as_str()),
            "{name}"
        );
        assert_eq!(
            p["sha256"].as_str(),
            Some(sha256(&archive).as_str()),
            "{name}"
        );
    }

    // Installed as Krew does on linux/amd64: unpack, keep `files`, link
    // kubectl-<plugin name> to `bin`. The link must work as the plugin.
    let linux = platforms
        .iter()
        .find(|p| {
            p["selector"]["matchLabels"]["os"] == "linux"
                && p["selector"]["matchLabels"]["arch"] == "amd64"
        })
        .expect("a linux/amd64 platform");
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).expect("mkdir");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(dist.join("nodegate-0.2.0-linux-amd64.tar.gz"))
        .arg("-C")
        .arg(&unpacked));
    let install = dir.path().join("install");
    std::fs::create_dir_all(&install).expect("mkdir");
    for f in linux["files"].as_array().expect("files") {
        let from = f["from"].as_str().expect("from");
        let to = install.join(f["to"].as_str().expect("to")).join(from);
        std::fs::copy(unpacked.join(from), &to)
            .unwrap_or_else(|e| panic!("files: {from} is not in the archive: {e}"));
    }
    let bin = install.join(linux["bin"].as_str().expect("bin"));
    let plugins = dir.path().join("bin");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    std::os::unix::fs::symlink(&bin, plugins.join("kubectl-nodegate")).expect("symlink");
    let help = run(Command::new(plugins.join("kubectl-nodegate")).arg("--help"));
    for cmd in ["explain", "status", "backfill", "completion"] {
        assert!(
            help.contains(cmd),
            "kubectl-nodegate --help lacks {cmd}:\n{help}"
        );
    }
}
