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
