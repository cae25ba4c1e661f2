//! The reload decision (applied, refused with the bad value named, keys
//! that need a restart) and the poller following a ConfigMap-style symlink
//! swap.

use std::os::unix::fs::symlink;
use std::time::Duration;

use nodegate_core::vocab::config::OnTimeout;

use super::*;
use crate::settings::config::run_settings;

fn run_args(extra: &[&str]) -> RunArgs {
    let mut argv = vec!["nodegate", "run"];
    argv.extend_from_slice(extra);
    match crate::settings::cli::Cli::try_parse_from(argv)
        .expect("flags parse")
        .command
    {
        crate::settings::cli::Command::Run(r) => *r,
        other => panic!("not run: {other:?}"),
    }
}

use clap::Parser;

/// Flags with `--config FILE` where FILE holds `start`; the settings and
/// configuration nodegate started with.
struct Started {
    _dir: tempfile::TempDir,
    args: RunArgs,
    settings: RunSettings,
    config: Config,
}

fn started(start: &str, flags: &[&str]) -> Started {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, start).expect("write");
    let path = path.to_str().expect("utf-8 path").to_string();
    let mut argv = vec!["--config", path.as_str()];
    argv.extend_from_slice(flags);
    let args = run_args(&argv);
    let settings = run_settings(&args).expect("the start file is valid");
    let config = Config::from(&settings);
    Started {
        _dir: dir,
        args,
        settings,
        config,
    }
}

fn reload(s: &Started, text: &str) -> Result<Reloaded, String> {
    decide(&s.args, text, "config.yaml", &s.settings, &s.config)
}

#[test]
fn a_valid_file_is_applied_with_every_gate_key() {
    let s = started("timeout: 60s\n", &[]);
    let r = reload(
        &s,
        "timeout: 5s\nonTimeout: keep\nsuspend: true\nexclude: [infra/agent]\n\
         taints: [example.com/boot:NoSchedule]\nnodeSelector: pool=gpu\n",
    )
    .expect("valid");
    assert_eq!(r.config.timeout, Some(Duration::from_secs(5)));
    assert_eq!(r.config.on_timeout, OnTimeout::Keep);
    assert!(r.config.suspend);
    assert_eq!(r.config.placement.excluded.len(), 1);
    assert_eq!(r.config.placement.managed_taints[0].key, "example.com/boot");
    assert!(r.config.scope.node_selector.is_some());
    assert!(r.needs_restart.is_empty(), "{:?}", r.needs_restart);
    // Back to the start file: back to the start configuration.
    let r = reload(&s, "timeout: 60s\n").expect("valid");
    assert_eq!(r.config, s.config);
}

#[test]
fn flags_still_win_over_the_new_file() {
    let s = started("timeout: 60s\n", &["--timeout", "30s"]);
    let r = reload(&s, "timeout: 5s\nsuspend: true\n").expect("valid");
    assert_eq!(r.config.timeout, Some(Duration::from_secs(30)));
    assert!(r.config.suspend);
}

#[test]
fn an_invalid_file_is_refused_naming_what_is_wrong() {
    let s = started("timeout: 60s\n", &[]);
    for (text, names) in [
        ("timeout: [unclosed\n", "config.yaml"),
        ("timeotu: 5s\n", "timeotu"),
        ("timeout: soon\n", "soon"),
        ("exclude: [no-slash]\n", "no-slash"),
        ("taints: []\n", "taints"),
        ("nodeSelector: \"a in (\"\n", "--node-selector"),
    ] {
        let err = reload(&s, text).expect_err(text);
        assert!(err.contains(names), "{text:?}: {err}");
    }
}

#[test]
fn changing_critical_pods_is_refused_as_needing_a_restart() {
    let start = "criticalPods:\n- name: dns\n  namespace: kube-system\n  selector:\n    matchLabels: {k8s-app: kube-dns}\n";
    let s = started(start, &[]);
    let err = reload(&s, "timeout: 5s\n").expect_err("critical pods removed");
    assert!(
        err.contains("criticalPods") && err.contains("restart"),
        "{err}"
    );
    // Unchanged critical pods, other keys changed: applied.
    let r = reload(&s, &format!("{start}suspend: true\n")).expect("valid");
    assert!(r.config.suspend);
}

#[test]
fn dra_drivers_are_refused_only_when_started_without_them() {
    let gpu = "draDrivers:\n- driver: gpu.nvidia.com\n";
    let s = started("timeout: 60s\n", &[]);
    let err = reload(&s, gpu).expect_err("no ResourceSlice watch");
    assert!(
        err.contains("draDrivers") && err.contains("restart"),
        "{err}"
    );
    // Started with them, the watch runs: the list may change, or go.
    let s = started(gpu, &[]);
    let r = reload(&s, "draDrivers:\n- driver: tpu.example.com\n").expect("valid");
    assert_eq!(r.config.dra_drivers[0].driver, "tpu.example.com");
    let r = reload(&s, "criticalResources:\n- resource: nvidia.com/gpu\n").expect("valid");
    assert!(r.config.dra_drivers.is_empty());
    assert_eq!(r.config.resources[0].resource, "nvidia.com/gpu");
}

#[test]
fn restart_only_keys_are_named_and_keep_their_start_values() {
    let s = started("timeout: 60s\n", &[]);
    let r = reload(
        &s,
        "timeout: 60s\nhttpAddr: 127.0.0.1:9999\ndryRun: true\nkubeQps: 7\nleaderElect: true\n",
    )
    .expect("applied with a warning");
    assert_eq!(
        r.needs_restart,
        ["dryRun", "kubeQps", "leaderElect", "httpAddr"]
    );
    assert!(!r.config.dry_run, "dryRun keeps its start value");
    assert_eq!(r.config, s.config);
}

/// A ConfigMap volume: `config.yaml` → `..data/config.yaml`, `..data` →
/// a timestamped directory; an update writes a new directory and renames a
/// new `..data` symlink over the old one.
#[test]
fn the_poller_follows_a_configmap_symlink_swap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let version = |name: &str, text: &str| {
        std::fs::create_dir(root.join(name)).expect("mkdir");
        std::fs::write(root.join(name).join("config.yaml"), text).expect("write");
    };
    version("..2026_01", "timeout: 60s\n");
    symlink("..2026_01", root.join("..data")).expect("symlink");
    symlink("..data/config.yaml", root.join("config.yaml")).expect("symlink");

    let mut poller = FilePoller::new(&root.join("config.yaml"));
    assert_eq!(poller.look(false), Look::Unchanged);

    version("..2026_02", "timeout: 5s\n");
    symlink("..2026_02", root.join("..data_tmp")).expect("symlink");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
    std::fs::remove_dir_all(root.join("..2026_01")).expect("old version gone");

    assert_eq!(poller.look(false), Look::Changed("timeout: 5s\n".into()));
    assert_eq!(poller.look(false), Look::Unchanged);
    // SIGHUP: the same text, decided again.
    assert_eq!(poller.look(true), Look::Changed("timeout: 5s\n".into()));
}

#[test]
fn an_unreadable_file_is_reported_once_then_again_when_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "suspend: false\n").expect("write");
    let mut poller = FilePoller::new(&path);
    std::fs::remove_file(&path).expect("rm");
    match poller.look(false) {
        Look::Unreadable(why) => assert!(why.contains("config.yaml"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(poller.look(false), Look::Unchanged, "reported once");
    std::fs::write(&path, "suspend: false\n").expect("write");
    assert_eq!(
        poller.look(false),
        Look::Changed("suspend: false\n".into()),
        "back: decided again"
    );
}

#[test]
fn the_poller_starts_from_the_file_as_it_is() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    assert_eq!(FilePoller::new(&path).text(), None, "no file yet");
    std::fs::write(&path, "suspend: true\n").expect("write");
    let poller = FilePoller::new(&path);
    assert_eq!(poller.text(), Some("suspend: true\n"));
    assert_eq!(poller.path(), path.as_path());
}

#[test]
fn condition_keys_are_applied_live_and_an_invalid_rule_is_refused() {
    let s = started("timeout: 60s\n", &[]);
    let r = reload(
        &s,
        "timeout: 60s\ncriticalConditions:\n- {type: NetworkReady, status: \"True\"}\n\
         conditionTaints:\n- name: p\n  conditions: [{type: Preempted, status: \"True\"}]\n  \
         taint: {key: example.com/p, effect: NoSchedule}\n",
    )
    .expect("condition keys reload");
    assert_eq!(r.config.conditions.len(), 1);
    assert_eq!(r.config.condition_taints.len(), 1);
    assert!(r.needs_restart.is_empty(), "{:?}", r.needs_restart);
    let e = reload(
        &s,
        "conditionTaints:\n- name: p\n  conditions: [{type: Preempted, status: \"(\"}]\n  \
         taint: {key: example.com/p, effect: NoSchedule}\n",
    )
    .expect_err("a bad regular expression is refused");
    assert!(
        e.contains("\"p\"") && e.contains("conditions[0].status"),
        "{e}"
    );
}

/// Hardening: `taints: [A]` reloaded as `[B]` keeps A managed
/// after B (nodes a lagging replica still taints with A are gated and
/// opened), while the entrances add B, the first; a retired taint carries
/// over further reloads; naming it again makes it an ordinary managed
/// taint.
#[test]
fn a_dropped_managed_taint_stays_managed_after_the_new_ones() {
    // No preset, so that only the --taints are managed.
    let s = started(
        "taints: [nodegate.dev/a:NoSchedule]\n",
        &["--autoscaler", "none"],
    );
    let keys = |c: &Config| -> Vec<String> {
        c.placement
            .managed_taints
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect()
    };
    let r = reload(&s, "taints: [nodegate.dev/b:NoSchedule]\n").expect("valid");
    assert_eq!(
        keys(&r.config),
        ["nodegate.dev/b:NoSchedule", "nodegate.dev/a:NoSchedule"]
    );
    assert_eq!(r.retired, ["nodegate.dev/a:NoSchedule"]);

    // Another reload against the configuration now in force: A stays
    // retired (and is named again in that reload's log line).
    let again = decide(
        &s.args,
        "taints: [nodegate.dev/b:NoSchedule]\ntimeout: 30s\n",
        "config.yaml",
        &s.settings,
        &r.config,
    )
    .expect("valid");
    assert_eq!(keys(&again.config), keys(&r.config));
    assert_eq!(again.retired, ["nodegate.dev/a:NoSchedule"]);

    // A named again: managed as configured, nothing retired.
    let back = decide(
        &s.args,
        "taints: [nodegate.dev/a:NoSchedule, nodegate.dev/b:NoSchedule]\n",
        "config.yaml",
        &s.settings,
        &again.config,
    )
    .expect("valid");
    assert_eq!(
        keys(&back.config),
        ["nodegate.dev/a:NoSchedule", "nodegate.dev/b:NoSchedule"]
    );
    assert!(back.retired.is_empty());

    // Unchanged taints retire nothing.
    let same = reload(&s, "taints: [nodegate.dev/a:NoSchedule]\ntimeout: 5s\n").expect("valid");
    assert!(same.retired.is_empty());
}
