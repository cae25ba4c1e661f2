//! The command line as a user meets it: bad input is refused with exit status
//! 2 and a message naming the bad value, before any cluster is contacted.

use std::process::Command;

fn nodegate(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        // A kubeconfig that cannot work: validation must fail before it is read.
        .env("KUBECONFIG", "/nonexistent/nodegate-test-kubeconfig")
        .output()
        .expect("run nodegate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn invalid_run_settings_exit_2_naming_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--timeout=-5s"], "-5s"),
        (&["run", "--timeout", "soon"], "soon"),
        (
            &["run", "--taint", "nodegate.dev/initializing:Sometimes"],
            "Sometimes",
        ),
        (&["run", "--taint", "Bad Key"], "Bad Key"),
        (&["run", "--exclude-selector", "tier in (a"], "tier in (a"),
        (&["run", "--exclude", "no-namespace"], "no-namespace"),
        (&["run", "--on-timeout", "maybe"], "maybe"),
        (
            &["run", "--config", "/nonexistent/nodegate.yaml"],
            "/nonexistent/nodegate.yaml",
        ),
    ];
    for (args, needle) in cases {
        let (code, stderr) = nodegate(args);
        assert_eq!(code, 2, "{args:?} should exit 2, stderr: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr should name {needle:?}: {stderr}"
        );
    }
}

#[test]
fn unknown_config_keys_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nodegate.yaml");
    std::fs::write(&path, "timeout: 30s\nonTimout: keep\n").expect("write config");
    let (code, stderr) = nodegate(&["run", "--config", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("onTimout"), "{stderr}");
}

#[test]
fn an_invalid_condition_rule_exits_2_naming_the_rule_and_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nodegate.yaml");
    for (rule, needles) in [
        (
            "  conditions: [{type: Disk, status: \"(\"}]\n  taint: {key: example.com/k, effect: NoSchedule}\n",
            &["\"kaput\"", "conditions[0].status", "\"(\""][..],
        ),
        (
            "  conditions: [{type: Disk, status: Kaput}]\n  taint: {key: example.com/k, effect: NoEntry}\n",
            &["\"kaput\"", "taint.effect", "NoEntry"],
        ),
        (
            "  conditions: [{type: Disk, status: Kaput}]\n  taint: {key: nodegate.dev/initializing, effect: NoSchedule}\n",
            &["\"kaput\"", "taint.key", "managed"],
        ),
    ] {
        std::fs::write(&path, format!("conditionTaints:\n- name: kaput\n{rule}"))
            .expect("write config");
        let (code, stderr) = nodegate(&["run", "--config", path.to_str().expect("utf-8 path")]);
        assert_eq!(code, 2, "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "stderr should name {n}: {stderr}");
        }
    }
}

#[test]
fn help_lists_the_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("--help")
        .output()
        .expect("run nodegate");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["run", "explain"] {
        assert!(text.contains(cmd), "--help should list {cmd}: {text}");
    }
}

/// `nodegate ARGS` run through `program` (a path to the binary, or a link
/// to it): (exit code, stdout, stderr).
fn run_as(program: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-test-kubeconfig")
        .output()
        .expect("run nodegate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bin() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_nodegate"))
}

#[test]
fn every_help_lists_the_exit_statuses() {
    for cmd in [
        &[][..],
        &["run"],
        &["explain"],
        &["status"],
        &["backfill"],
        &["uninstall"],
        &["version"],
        &["completion"],
        &["config", "check"],
        &["doctor"],
    ] {
        let args: Vec<&str> = cmd.iter().copied().chain(["--help"]).collect();
        let (code, out, _) = run_as(bin(), &args);
        assert_eq!(code, 0, "{args:?}");
        assert!(
            out.contains("Exit status:") && out.contains("  2  bad usage"),
            "{args:?} --help lacks the exit statuses:\n{out}"
        );
    }
}

#[test]
fn as_the_kubectl_plugin_usage_reads_kubectl_nodegate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = dir.path().join("kubectl-nodegate");
    std::os::unix::fs::symlink(bin(), &plugin).expect("link kubectl-nodegate");
    let (_, out, _) = run_as(&plugin, &["explain", "--help"]);
    assert!(out.contains("Usage: kubectl nodegate explain"), "{out}");
    let (code, _, err) = run_as(&plugin, &["explain"]);
    assert_eq!(code, 2);
    assert!(err.contains("Usage: kubectl nodegate explain"), "{err}");
    let (_, out, _) = run_as(bin(), &["explain", "--help"]);
    assert!(out.contains("Usage: nodegate explain"), "{out}");
}

#[test]
fn kubectl_flags_are_taken_and_bad_values_refused_before_the_cluster() {
    for args in [
        &["explain", "n1", "--request-timeout", "soon"][..],
        &["status", "--request-timeout=-1s"],
        &["--request-timeout", "soon", "status"],
        &["backfill", "--dry-run", "--request-timeout", "x"],
        &["version", "--request-timeout", "x"],
        &["uninstall", "--dry-run", "--request-timeout", "x"],
        &["doctor", "--request-timeout", "x"],
    ] {
        let (code, _, err) = run_as(bin(), args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--request-timeout"), "{args:?}: {err}");
    }
    // A kubeconfig that does not exist is named (exit 1: the cluster could
    // not be reached), not mistaken for --config.
    let (code, _, err) = run_as(
        bin(),
        &["status", "--kubeconfig", "/nonexistent/kc", "-o", "yaml"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent/kc"), "{err}");
}

#[test]
fn version_prints_the_client_without_a_cluster() {
    let (code, out, err) = run_as(bin(), &["version", "--client"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("Client: {}\n", env!("CARGO_PKG_VERSION")));
    let (code, out, _) = run_as(bin(), &["version", "--client", "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["client"], env!("CARGO_PKG_VERSION"));
    // Without a cluster, as kubectl: the client's version, then the error.
    let (code, out, err) = run_as(bin(), &["version"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, format!("Client: {}\n", env!("CARGO_PKG_VERSION")));
    assert!(err.contains("cannot connect to the cluster"), "{err}");
}

/// `nodegate --version` names the commit the binary was built from: what
/// NODEGATE_REVISION named, else in a release build HEAD of this checkout
/// (build.rs); a debug build says `dev` (the commit would recompile every
/// test binary at every commit). The image's binary, a release build given
/// its commit, is checked by tests/e2e_image.rs.
#[test]
fn version_flag_names_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("--version")
        .output()
        .expect("run nodegate --version");
    assert!(out.status.success(), "{out:?}");
    let expected = match option_env!("NODEGATE_REVISION") {
        Some(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ if cfg!(debug_assertions) => "dev".to_string(),
        _ => {
            let head = Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("run git rev-parse HEAD");
            assert!(head.status.success(), "git rev-parse HEAD: {head:?}");
            let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
            assert_eq!(head.len(), 40, "HEAD is a full commit id: {head}");
            head
        }
    };
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("nodegate {} ({expected})\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn uninstall_wants_dry_run_or_yes() {
    let (code, _, err) = run_as(bin(), &["uninstall"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--dry-run") && err.contains("--yes"), "{err}");
    let (code, _, err) = run_as(bin(), &["uninstall", "--dry-run", "--yes"]);
    assert_eq!(code, 2, "{err}");
}

/// Writes `yaml` to a fresh file; the directory lives as long as the path.
fn config_file(yaml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nodegate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let shown = path.to_str().expect("utf-8 path").to_string();
    (dir, shown)
}

/// Issue 25: `config check` on a good file, offline (the kubeconfig cannot
/// work): exit 0 and the settings it means, as text and as JSON.
#[test]
fn config_check_prints_what_a_good_file_means_offline() {
    let yaml = "timeout: 5m\nnodeSelector: pool=gpu\ncriticalPods:\n- name: gpu\n  namespace: kube-system\n  selector: app=gpu\n  nodeSelector: {matchLabels: {gpu: \"true\"}}\n";
    let (_dir, path) = config_file(yaml);
    let (code, out, err) = run_as(bin(), &["config", "check", &path]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "is valid",
        "timeout: 5m",
        "nodeSelector: pool=gpu",
        "selector: app=gpu",
        "gpu=true",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }
    let (code, out, err) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["valid"], true);
    assert_eq!(v["settings"]["criticalPods"][0]["nodeSelector"], "gpu=true");
    let (code, out, _) = run_as(bin(), &["config", "check", "--help"]);
    assert!(code == 0 && out.contains("Exit status:") && out.contains("the file is refused"));
}

/// Issue 25: `config check` on bad files: exit 2, every independent problem
/// named, the typo with its suggestion; `-o json` lists them on stdout.
#[test]
fn config_check_names_every_problem_of_a_bad_file() {
    let (_dir, path) = config_file(
        "criticalPods:\n- name: gpu\n  namespace: kube-system\n  selector: {matchLabels: {app: gpu}}\n  nodeSelector: {matchLabel: {gpu: \"true\"}}\n",
    );
    let (code, out, err) = run_as(bin(), &["config", "check", &path]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("unknown key `matchLabel`; did you mean `matchLabels`?"),
        "{err}"
    );
    assert!(err.contains("line 5"), "{err}");
    let (_dir2, path) = config_file(
        "timeout: soon\nmaxUnavailable: 0\ncriticalPods:\n- {name: p, namespace: kube-system}\n",
    );
    let (code, out, _) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 2, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["valid"], false);
    let all = v["problems"].to_string();
    for want in ["soon", "--max-unavailable \\\"0\\\"", "criticalPods[0] (p)"] {
        assert!(all.contains(want), "{want:?} not in {all}");
    }
}

/// Issue 25: an endless file (/dev/zero) and a 1 GiB one are refused after
/// the 1 MiB cap: at once, in bounded memory (the old code read them whole:
/// 16.5 GB of RSS for /dev/zero before it was killed). Bounded memory is
/// checked with an address-space limit the old code could not stay under.
#[test]
fn an_endless_or_huge_config_file_is_refused_with_bounded_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let huge = dir.path().join("huge.yaml");
    let f = std::fs::File::create(&huge).expect("create");
    f.set_len(1 << 30).expect("sparse 1 GiB file");
    for file in ["/dev/zero", huge.to_str().expect("utf-8 path")] {
        for cmd in [&["config", "check"][..], &["run", "--config"]] {
            // 1 GiB of address space: enough for the binary, not for the file.
            let script = format!("ulimit -v 1048576; exec \"$0\" {} {file}", cmd.join(" "));
            let out = Command::new("sh")
                .args(["-c", &script, env!("CARGO_BIN_EXE_nodegate")])
                .env("KUBECONFIG", "/nonexistent/nodegate-test-kubeconfig")
                .output()
                .expect("run nodegate");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?} {file}: {err}");
            assert!(
                err.contains("larger than 1024 KiB"),
                "{cmd:?} {file}: {err}"
            );
        }
    }
}

/// `nodegate doctor`'s bad arguments exit 2 naming the value, before any
/// request (KUBECONFIG points at nothing: reaching for the cluster would
/// exit 1); as the kubectl plugin its usage reads `kubectl nodegate doctor`.
#[test]
fn doctor_refuses_bad_arguments_with_2_naming_them() {
    for (args, named) in [
        (&["doctor", "--timeout", "soon"][..], "soon"),
        (&["doctor", "--taint", "bad key:NoSchedule"], "bad key"),
        (
            &["doctor", "--from-cluster", "--timeout", "5m"],
            "--from-cluster",
        ),
        (
            &["doctor", "--from-cluster", "--config", "/x.yaml"],
            "--from-cluster",
        ),
        (
            &["doctor", "--config", "/nonexistent/nodegate.yaml"],
            "/nonexistent/nodegate.yaml",
        ),
        (&["doctor", "--frm-cluster"], "--frm-cluster"),
        (&["doctor", "-o", "xml"], "xml"),
    ] {
        let (code, _, err) = run_as(bin(), args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {named} not in {err}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = dir.path().join("kubectl-nodegate");
    std::os::unix::fs::symlink(bin(), &plugin).expect("link kubectl-nodegate");
    let (code, out, _) = run_as(&plugin, &["doctor", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Usage: kubectl nodegate doctor"), "{out}");
    for flag in [
        "--from-cluster",
        "--kubeconfig",
        "--context",
        "--request-timeout",
        "--output",
    ] {
        assert!(out.contains(flag), "{flag} not in:\n{out}");
    }
}
