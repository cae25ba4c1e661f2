//! `nodegate config check`: the config file validated exactly as `nodegate
//! run --config FILE` validates it ([`run_settings_from`], the same code),
//! and, when it is refused, every problem that can be found: the file's
//! parts that do not depend on one another (the gate's keys, the run keys,
//! each list of critical members and rules) are checked apart too, each
//! naming its first problem. Nothing here talks to the cluster.

use super::*;
use crate::settings::table::GateGiven;

/// The settings `nodegate run --config FILE` (with `args`' flags) would run
/// with, or every problem found, the one `run` reports first.
pub fn check_file(args: &RunArgs) -> Result<RunSettings, Vec<ConfigError>> {
    let file = load_file(&args.gate).map_err(|e| vec![e])?;
    let first = match run_settings_from(args, file) {
        Ok(settings) => return Ok(settings),
        Err(e) => e,
    };
    let mut problems = vec![first];
    // The file parsed once, so it parses again; each pass gets its own copy.
    let fresh = || load_file(&args.gate).ok();
    let mut more = Vec::new();
    if let Some(mut f) = fresh() {
        more.push(gate_settings(&args.gate, &mut f).err());
    }
    if let Some(mut f) = fresh() {
        // The gate's keys without the lists checked apart below.
        (f.critical_pods, f.critical_conditions, f.condition_taints) = (None, None, None);
        (f.critical_resources, f.dra_drivers) = (None, None);
        more.push(gate_settings(&args.gate, &mut f).err());
    }
    if let Some(mut f) = fresh() {
        let _ = GateGiven::merge(&args.gate.flags, &mut f);
        let (pods, conds, rules) = (
            f.critical_pods.take(),
            f.critical_conditions.take(),
            f.condition_taints.take(),
        );
        f.suspend = None;
        more.push(devices::critical_resources(f.critical_resources.take()).err());
        more.push(devices::dra_drivers(f.dra_drivers.take()).err());
        more.push(critical_pods(pods.unwrap_or_default()).err());
        more.push(conditions::critical_conditions(conds).err());
        let managed = managed_taints(&GateGiven::defaults().taints).unwrap_or_default();
        more.push(conditions::condition_taints(rules, &managed).err());
        let defaults = gate_settings(&GateArgs::default(), &mut FileConfig::default());
        if let Ok(gate) = defaults {
            more.push(run_part(args, gate, f).err());
        }
    }
    for e in more.into_iter().flatten() {
        if !problems.iter().any(|p| p.to_string() == e.to_string()) {
            problems.push(e);
        }
    }
    Err(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn check(yaml: &str) -> Result<RunSettings, Vec<String>> {
        let dir = tempfile::tempdir().map_err(|e| vec![e.to_string()])?;
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, yaml).map_err(|e| vec![e.to_string()])?;
        let cli = crate::settings::cli::Cli::try_parse_from([
            "nodegate",
            "run",
            "--config",
            path.to_str().unwrap_or_default(),
        ])
        .map_err(|e| vec![e.to_string()])?;
        let crate::settings::cli::Command::Run(args) = cli.command else {
            return Err(vec!["not run".to_string()]);
        };
        check_file(&args).map_err(|v| v.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn independent_problems_are_all_named() {
        let yaml = "timeout: soon\ncriticalPods:\n- {name: p, namespace: kube-system}\n\
                    conditionTaints:\n- name: r\n  conditions: [{type: A, status: \"True\"}]\n  \
                    taint: {key: example.com/a, effect: Sometimes}\n";
        let problems = check(yaml).err().unwrap_or_default();
        let all = problems.join("\n");
        for want in ["soon", "criticalPods[0] (p)", "Sometimes"] {
            assert!(all.contains(want), "{want:?} not in {all}");
        }
    }

    #[test]
    fn a_valid_file_yields_run_settings() {
        let s = check("timeout: 5m\n");
        assert!(
            s.as_ref()
                .is_ok_and(|s| s.timeout == Some(Duration::from_secs(300))),
            "{s:?}"
        );
    }
}
