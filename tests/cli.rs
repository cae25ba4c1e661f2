//! The command line as a user meets it: bad input is refused with exit status
//! 2 and a message naming the bad value, before any cluster is contacted.

use std::process::Command;

/// This clone, read when the test runs (the build cache is shared between
/// clones, so the compile-time path may name another one).
fn repo() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}

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
        (&["run", "--worker-threads", "257"], "--worker-threads 257"),
        (&["run", "--worker-threads", "-1"], "-1"),
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
        &["probe"],
    ] {
        let args: Vec<&str> = cmd.iter().copied().chain(["--help"]).collect();
        let (code, out, _) = run_as(bin(), &args);
        assert_eq!(code, 0, "{args:?}");
        assert!(
            out.contains("Exit status:") && out.contains("  2  bad usage"),
            "{args:?} --help lacks the exit statuses:\n{out}"
        );
        // Issue 38: one scheme, every code in every command's help.
        for code in ["  0  ", "  1  could not do it", "  3"] {
            assert!(out.contains(code), "{args:?} --help lacks {code:?}:\n{out}");
        }
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
    assert!(
        err.contains("cannot read the kubeconfig /nonexistent/nodegate-test-kubeconfig"),
        "{err}"
    );
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
                .current_dir(repo())
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

/// A report read through `| head`, whose reader has gone: the closed pipe
/// is the reader's choice, so the command succeeds and says nothing of it.
#[test]
fn a_report_into_a_closed_pipe_is_not_an_error() {
    let (_dir, path) = config_file("timeout: 5m\n");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(bin())
        .args(["config", "check", &path])
        .env("KUBECONFIG", "/nonexistent/nodegate-test-kubeconfig")
        .stdout(writer)
        .output()
        .expect("run nodegate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("stdout"), "{err}");
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
    assert!(err.contains("nodegate.yaml:5: "), "{err}");
    let (_dir2, path) = config_file(
        "timeout: soon\nmaxUnavailable: 0\ncriticalPods:\n- {name: p, namespace: kube-system}\n",
    );
    let (code, out, _) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 2, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["valid"], false);
    let all = v["problems"].to_string();
    for want in [
        "nodegate.yaml:1: timeout: \\\"soon\\\": not a duration",
        "nodegate.yaml:2: maxUnavailable: \\\"0\\\"",
        "nodegate.yaml:3: criticalPods[0] (p)",
    ] {
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

/// A loopback address nothing listens on: a port the kernel gave out and
/// took back, so a connection to it is refused at once.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("https://{addr}")
}

/// A kubeconfig whose one context, `dead`, names `server`.
fn kubeconfig_for(dir: &std::path::Path, server: &str) -> String {
    let path = dir.join("dead.yaml");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster: {{server: \"{server}\"}}\n\
         contexts:\n- name: dead\n  context: {{cluster: dead, user: u}}\ncurrent-context: dead\n\
         users:\n- name: u\n  user: {{token: x}}\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path.to_str().expect("utf-8 path").to_string()
}

/// The one error line a command printed: stderr is exactly one line,
/// shorter than 200 characters, with no Rust type in it.
fn one_error_line(args: &[&str], err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line:\n{err}");
    let line = lines[0];
    assert!(
        line.chars().count() < 200,
        "{args:?}: {} chars: {line}",
        line.chars().count()
    );
    for leak in [
        "ServiceError",
        "HyperError",
        "ApiError",
        "Error {",
        "os error",
        "'\"",
        "(Connect)",
    ] {
        assert!(!line.contains(leak), "{args:?}: {leak:?} in {line}");
    }
    line.to_string()
}

/// Issue 38, finding 4: the two commonest connection errors, one line each,
/// kubectl-style, for every command that reads the cluster: a missing
/// kubeconfig names its path once, the cause once and the fix; a refused
/// server names the server and the context once and the cause once. Exit 1
/// (could not do it).
#[test]
fn connection_errors_are_one_line_naming_the_file_or_the_server_once() {
    let commands: &[&[&str]] = &[
        &["status"],
        &["explain", "n1"],
        &["backfill", "--dry-run"],
        &["uninstall", "--dry-run"],
        &["version"],
        &["doctor"],
        &["doctor", "--from-cluster"],
    ];
    let missing = "/nonexistent/nodegate-test-kubeconfig";
    for args in commands {
        let (code, _, err) = run_as(bin(), args);
        assert_eq!(code, 1, "{args:?}: {err}");
        let line = one_error_line(args, &err);
        assert_eq!(line.matches(missing).count(), 1, "{args:?}: {line}");
        assert_eq!(
            line.matches("no such file or directory").count(),
            1,
            "{line}"
        );
        assert!(
            line.contains("KUBECONFIG") && line.contains("--kubeconfig"),
            "{line}"
        );
    }
    let (code, _, err) = run_as(bin(), &["status", "--kubeconfig", "/nonexistent/kc"]);
    assert_eq!(code, 1, "{err}");
    let line = one_error_line(&["--kubeconfig"], &err);
    assert_eq!(line.matches("/nonexistent/kc").count(), 1, "{line}");

    let dir = tempfile::tempdir().expect("temp dir");
    let server = closed_port();
    let kc = kubeconfig_for(dir.path(), &server);
    let (_empty_dir, empty) = config_file("");
    let mut with_file: Vec<Vec<&str>> = commands.iter().map(|c| c.to_vec()).collect();
    with_file.push(vec!["config", "check", "--cluster", &empty]);
    for args in &with_file {
        let mut full = args.clone();
        full.extend(["--kubeconfig", kc.as_str()]);
        let (code, _, err) = run_as(bin(), &full);
        assert_eq!(code, 1, "{full:?}: {err}");
        let line = one_error_line(&full, &err);
        assert_eq!(line.matches(&server).count(), 1, "{full:?}: {line}");
        assert_eq!(line.matches("context \"dead\"").count(), 1, "{line}");
        assert_eq!(line.matches("connection refused").count(), 1, "{line}");
    }
}

/// Issue 38, findings 3 and 5: `run` takes --kubeconfig like every other
/// command; at a cluster that does not answer it logs the failure once,
/// then exits 1 after the bounded wait its help states (30 s); `--log-level
/// warning` is `warn` and logs that warning. A bare word that is no level
/// is refused with 2, on the flag and in the file.
#[test]
fn run_at_an_unreachable_cluster_logs_a_warning_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = closed_port();
    let kc = kubeconfig_for(dir.path(), &server);
    let (code, _, err) = run_as(
        bin(),
        &[
            "run",
            "--kubeconfig",
            &kc,
            "--log-level",
            "warning",
            "--http-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "",
        ],
    );
    assert_eq!(code, 1, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "one warning, then the error:\n{err}");
    assert!(warnings[0].contains(&server), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains("connection refused"), "{err}");
    let (_, help, _) = run_as(bin(), &["run", "--help"]);
    assert!(help.contains("30 s of start"), "{help}");

    for level in ["verbose", "warning,loud"] {
        let (code, _, err) = run_as(bin(), &["run", "--log-level", level]);
        assert_eq!(code, 2, "{level}: {err}");
        assert!(err.contains("not a level"), "{level}: {err}");
    }
    let (_d, path) = config_file("logLevel: verbose\n");
    let (code, _, err) = run_as(bin(), &["config", "check", &path]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(":1: logLevel: \"verbose\": not a level"),
        "{err}"
    );
    let (_d, path) = config_file("logLevel: warning,nodegate=debug\n");
    let (code, out, err) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["settings"]["logLevel"], "warn,nodegate=debug");
}

/// Issue 38, finding 6: `config check -o json` on an empty file prints
/// every key docs/configuration.md documents (its flag table and its reload
/// table), and every key it prints is documented; typed values, no prose.
#[test]
fn config_check_of_an_empty_file_prints_every_documented_key() {
    let docs = std::fs::read_to_string(repo().join("docs/configuration.md"))
        .expect("read docs/configuration.md");
    let (_d, path) = config_file("");
    let (code, out, err) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let shown: std::collections::BTreeSet<String> = v["settings"]
        .as_object()
        .expect("settings")
        .keys()
        .cloned()
        .collect();
    let backticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .filter(|k| k.starts_with(|c: char| c.is_ascii_lowercase()))
            .filter(|k| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '*'))
            .collect()
    };
    let mut documented = Vec::new();
    for line in docs.lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        if line.starts_with("| `--") && cells.len() == 4 {
            documented.extend(backticked(cells[1]));
        }
        if cells.len() == 2 && (line.contains("| applied at once") || line.contains("| need")) {
            documented.extend(backticked(cells[0]));
        }
    }
    assert!(documented.len() > 40, "{documented:?}");
    for key in &documented {
        let found = match key.strip_suffix('*') {
            Some(prefix) => shown.iter().any(|k| k.starts_with(prefix)),
            None => shown.contains(key),
        };
        assert!(
            found,
            "documented key {key:?} missing from config check -o json: {shown:?}"
        );
    }
    for key in &shown {
        let by_prefix = documented
            .iter()
            .filter_map(|d| d.strip_suffix('*'))
            .any(|prefix| key.starts_with(prefix));
        assert!(
            docs.contains(&format!("`{key}`")) || by_prefix,
            "{key} is not in docs/configuration.md"
        );
    }
    let text = v["settings"].to_string();
    for prose in ["(every", "(off)", "(none)", "(at once)"] {
        assert!(!text.contains(prose), "{prose:?} in {text}");
    }
    assert_eq!(v["settings"]["kubeQps"], 50);
    assert_eq!(v["settings"]["timeout"], "2m");
}

/// Issue 38, finding 7: a check that ran and found problems is 3, "could
/// not look" is 1; the file's own problems are bad usage, 2.
#[test]
fn problems_found_exit_3_and_help_says_so() {
    for args in [&["doctor", "--help"][..], &["config", "check", "--help"]] {
        let (_, out, _) = run_as(bin(), args);
        assert!(
            out.contains("  3  checked and found problems"),
            "{args:?}:\n{out}"
        );
        assert!(!out.contains("  1  a check found"), "{out}");
    }
}

/// Issue 38, finding 11: each command's own flags first, the gate settings
/// and the connection under their headings; one duration rule everywhere (a
/// bare number is seconds).
#[test]
fn help_is_grouped_and_a_bare_number_is_seconds() {
    let (_, out, _) = run_as(bin(), &["status", "--help"]);
    let at = |s: &str| {
        out.find(s)
            .unwrap_or_else(|| panic!("{s:?} not in:\n{out}"))
    };
    assert!(at("--watch") < at("Gate settings"), "{out}");
    assert!(at("--watch") < at("--regate-allow-no-execute"), "{out}");
    assert!(at("Output:") < at("Cluster:"), "{out}");
    assert!(at("Cluster:") < at("--kubeconfig"), "{out}");
    let (_, out, _) = run_as(bin(), &["run", "--help"]);
    for heading in ["Deadline:", "Leader election:", "Logging:", "Cluster:"] {
        assert!(out.contains(heading), "{heading} not in run --help");
    }
    let (_, out, _) = run_as(bin(), &["doctor", "--help"]);
    let at = |s: &str| {
        out.find(s)
            .unwrap_or_else(|| panic!("{s:?} not in:\n{out}"))
    };
    assert!(at("--from-cluster") < at("--taint "), "{out}");
    let (_d, path) = config_file("timeout: 300\nregateAfter: 90\n");
    let (code, out, err) = run_as(bin(), &["config", "check", "-o", "json", &path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["settings"]["timeout"], "5m");
    assert_eq!(v["settings"]["regateAfter"], "90s");
    let (code, _, err) = run_as(
        bin(),
        &["status", "--timeout", "5", "--request-timeout", "5"],
    );
    assert_eq!(
        code, 1,
        "a bare number is taken, the cluster is not there: {err}"
    );
}

/// Issue 38, finding 6: `run --config FILE` says a problem of the file as
/// `FILE:LINE: key: what is wrong`, as `config check` does; a bad flag is
/// still named as the flag.
#[test]
fn run_names_the_file_s_key_and_line() {
    let (_d, path) = config_file("onTimeout: keep\ntimeout: -5s\n");
    let (code, err) = nodegate(&["run", "--config", &path]);
    assert_eq!(code, 2, "{err}");
    let want = format!("error: {path}:2: timeout: \"-5s\": a duration cannot be negative");
    assert_eq!(err.trim(), want);
    let (code, err) = nodegate(&["run", "--config", &path, "--timeout=-6s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--timeout \"-6s\""), "{err}");
}

/// Issue 38, finding 11: `status --watch` at a cluster that does not answer
/// says so once, however many times it tries (it printed a new error every
/// refresh, for ever), and keeps trying until stopped.
#[test]
fn status_watch_says_once_that_the_cluster_does_not_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = closed_port();
    let kc = kubeconfig_for(dir.path(), &server);
    let mut child = Command::new(bin())
        .args([
            "status",
            "--watch",
            "--interval",
            "100ms",
            "--kubeconfig",
            &kc,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nodegate status --watch");
    // Long enough for tens of refreshes at --interval 100ms.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let still_running = child.try_wait().expect("try_wait").is_none();
    child.kill().expect("stop nodegate status --watch");
    let out = child.wait_with_output().expect("output");
    assert!(still_running, "it gave up: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("cannot reach the API server").count(),
        1,
        "{err}"
    );
    assert!(err.contains(&server), "{err}");
}

/// The shipped allocator runs with glibc's per-thread cache of freed blocks
/// off (docs/benchmarks.md, "The allocator"), which glibc reads only from
/// the environment at load: the binary starts itself again with
/// `GLIBC_TUNABLES` set (`run` only: the short commands end too soon for it
/// to matter). Seen from outside: the controller that connects to the
/// cluster (after the restart) has the tunable in its environment and is
/// still named `nodegate`, and a user's own setting of it is kept.
#[test]
fn the_binary_runs_with_glibcs_thread_cache_off_and_keeps_a_users_setting() {
    for (given, wanted) in [
        (None, "glibc.malloc.tcache_count=0"),
        (
            Some("glibc.malloc.mxfast=0"),
            "glibc.malloc.mxfast=0:glibc.malloc.tcache_count=0",
        ),
        (
            Some("glibc.malloc.tcache_count=3"),
            "glibc.malloc.tcache_count=3",
        ),
    ] {
        // A "cluster" that takes the connection and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let server = format!("https://{}", listener.local_addr().expect("addr"));
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = Command::new(bin());
        command
            .args(["run", "--http-addr", "127.0.0.1:0", "--debug-addr", ""])
            .env("KUBECONFIG", kubeconfig_for(dir.path(), &server))
            .env_remove("GLIBC_TUNABLES")
            .env_remove("NODEGATE_ALLOC_RESTARTED")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(v) = given {
            command.env("GLIBC_TUNABLES", v);
        }
        let mut child = command.spawn().expect("start nodegate");
        // nodegate connects only after the allocator is set up.
        let connection = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(status) = child.try_wait().expect("poll nodegate") {
                        panic!("{given:?}: nodegate exited ({status}) before connecting");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        let environ =
            std::fs::read(format!("/proc/{}/environ", child.id())).expect("read its environment");
        // Still named after its file, as `ps` and `pgrep nodegate` show it.
        let name =
            std::fs::read_to_string(format!("/proc/{}/comm", child.id())).expect("read its name");
        // Our own child, not yet waited for: its pid cannot have been reused.
        child.kill().expect("stop nodegate");
        child.wait().expect("reap nodegate");
        drop(connection);
        assert_eq!(tunables(&environ), wanted, "{given:?}");
        assert_eq!(name.trim_end(), "nodegate", "{given:?}");
    }
}

/// `GLIBC_TUNABLES` as a process's /proc/PID/environ shows it. glibc ends
/// each tunable in place with a NUL as it reads them, so a list of them
/// shows as one `GLIBC_TUNABLES=` entry followed by entries of their own.
fn tunables(environ: &[u8]) -> String {
    let mut entries = environ.split(|b| *b == 0).map(String::from_utf8_lossy);
    let Some(first) = entries.find(|e| e.starts_with("GLIBC_TUNABLES=")) else {
        return String::new();
    };
    let mut list = vec![first["GLIBC_TUNABLES=".len()..].to_string()];
    list.extend(
        entries
            .take_while(|e| e.starts_with("glibc."))
            .map(|e| e.into_owned()),
    );
    list.join(":")
}
