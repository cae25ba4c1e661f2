//! Where the doctor's settings come from: the Deployment's args and the
//! ConfigMap its --config is mounted from, and the refusal of settings
//! given twice.

use clap::Parser;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::source::{config_map_of, parse_run, refuse_settings_with_from_cluster, run_words};
use crate::settings::cli::{Cli, Command, DoctorArgs};

fn doctor(args: &[&str]) -> DoctorArgs {
    let argv = ["nodegate", "doctor"].iter().chain(args.iter()).copied();
    match Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Doctor(a)) => *a,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn strings(s: &[&str]) -> Option<Vec<String>> {
    Some(s.iter().map(|w| w.to_string()).collect())
}

#[test]
fn the_run_flags_are_found_after_run_in_command_or_args() {
    let base = Container {
        name: "nodegate".into(),
        args: strings(&["run", "--leader-elect", "--timeout=5m"]),
        ..Container::default()
    };
    assert_eq!(
        run_words(&base),
        strings(&["--leader-elect", "--timeout=5m"])
    );
    let command = Container {
        command: strings(&["/nodegate", "run"]),
        args: strings(&["--taint-new-nodes"]),
        ..Container::default()
    };
    assert_eq!(run_words(&command), strings(&["--taint-new-nodes"]));
    assert_eq!(run_words(&Container::default()), None);
}

#[test]
fn the_deployments_args_parse_as_run_parses_them() {
    let words =
        strings(&["--leader-elect", "--timeout=5m", "--lease-name", "ng"]).unwrap_or_default();
    let args = parse_run(&words).expect("valid args");
    let s = crate::settings::config::run_settings(&args).expect("valid settings");
    assert_eq!(s.timeout, Some(std::time::Duration::from_secs(300)));
    assert_eq!(s.leader_election.lease_name, "ng");
    let bad = parse_run(&strings(&["--timout=5m"]).unwrap_or_default());
    assert!(
        bad.as_ref().is_err_and(|e| e.contains("--timout")),
        "{bad:?}"
    );
}

#[test]
fn the_config_file_is_found_in_its_configmap_volume() {
    let spec: PodSpec = serde_json::from_value(serde_json::json!({
        "containers": [{"name": "nodegate", "volumeMounts": [
            {"name": "config", "mountPath": "/etc/nodegate", "readOnly": true},
        ]}],
        "volumes": [{"name": "config", "configMap": {"name": "nodegate-config"}}],
    }))
    .expect("a pod spec");
    let c = &spec.containers[0];
    assert_eq!(
        config_map_of(&spec, c, "/etc/nodegate/config.yaml"),
        Some(("nodegate-config".to_string(), "config.yaml".to_string()))
    );
    assert_eq!(config_map_of(&spec, c, "/etc/nodegatex/config.yaml"), None);
    assert_eq!(config_map_of(&spec, c, "/tmp/config.yaml"), None);
    let items: PodSpec = serde_json::from_value(serde_json::json!({
        "containers": [{"name": "nodegate", "volumeMounts": [{"name": "c", "mountPath": "/cfg/"}]}],
        "volumes": [{"name": "c", "configMap": {"name": "cm", "items": [{"key": "nodegate.yaml", "path": "file.yaml"}]}}],
    }))
    .expect("a pod spec");
    assert_eq!(
        config_map_of(&items, &items.containers[0], "/cfg/file.yaml"),
        Some(("cm".to_string(), "nodegate.yaml".to_string()))
    );
}

#[test]
fn from_cluster_refuses_settings_given_here_too() {
    assert!(refuse_settings_with_from_cluster(&doctor(&["--from-cluster"])).is_ok());
    assert!(refuse_settings_with_from_cluster(&doctor(&["--timeout", "5m"])).is_ok());
    for given in [
        &["--from-cluster", "--timeout", "5m"][..],
        &["--from-cluster", "--taint", "a:NoSchedule"],
        &["--from-cluster", "--config", "/x.yaml"],
        &["--from-cluster", "--leader-elect"],
    ] {
        let e = refuse_settings_with_from_cluster(&doctor(given)).map_err(|e| e.to_string());
        assert!(
            e.as_ref().is_err_and(|e| e.contains("--from-cluster")),
            "{given:?}: {e:?}"
        );
    }
}
