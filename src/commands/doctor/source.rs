//! Where the doctor gets nodegate's settings: the flags and `--config` given
//! (parsed exactly as `nodegate run` parses them), or, with `--from-cluster`,
//! the container args of nodegate's Deployment and the config file they
//! name, from its ConfigMap (also for `explain` and `status`).

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use kube::Api;

use super::fetch::Readable;
use crate::error::{Error, Result};
use crate::settings::cli::{Cli, Command, DoctorArgs, GateArgs, InstalledArgs, RunArgs};
use crate::settings::config::{self, ConfigError, FileConfig, RunSettings};
use crate::settings::table::{GateGiven, GateSet, RunGiven, RunSet};

/// With `--from-cluster`, no setting may be given here too: which one
/// would win is not obvious. Exit 2 naming the flag.
pub fn refuse_settings_with_from_cluster(args: &DoctorArgs) -> Result<(), ConfigError> {
    if !args.from_cluster {
        return Ok(());
    }
    let mut empty = FileConfig::default();
    let gate = GateGiven::merge(&args.run.gate.flags, &mut empty).set;
    let run = RunGiven::merge(&args.run.flags, &mut empty).set;
    if args.run.gate.config.is_some() || gate != GateSet::default() || run != RunSet::default() {
        return Err(config::invalid(
            "--from-cluster",
            "reads nodegate's settings from its Deployment: give either it or nodegate's flags \
             and --config, not both",
        ));
    }
    Ok(())
}

/// `explain`/`status --from-cluster`: no gate setting may be given too
/// (which would win is not obvious), nor `others` (the command's own
/// settings the Deployment decides, by flag name). Exit 2 naming it.
pub fn refuse_gate_flags_with_from_cluster(
    installed: &InstalledArgs,
    gate: &GateArgs,
    others: &[(&str, bool)],
) -> Result<(), ConfigError> {
    if !installed.from_cluster {
        return Ok(());
    }
    let mut empty = FileConfig::default();
    let given = GateGiven::merge(&gate.flags, &mut empty).set;
    let other = others.iter().find(|(_, given)| *given).map(|(f, _)| *f);
    if gate.config.is_some() || given != GateSet::default() || other.is_some() {
        let named = other.unwrap_or("gate flags and --config");
        return Err(config::invalid(
            "--from-cluster",
            format!(
                "reads the gate settings from nodegate's Deployment: give either it or {named}, not both"
            ),
        ));
    }
    Ok(())
}

/// The settings the installed nodegate runs with: its Deployment
/// (`installed.namespace`/`installed.deployment`) read as `doctor
/// --from-cluster` reads it. The error names the Deployment and what to
/// pass instead.
pub async fn installed_settings(
    client: &kube::Client,
    installed: &InstalledArgs,
) -> Result<RunSettings> {
    let (ns, name) = (&installed.namespace, &installed.deployment);
    let got = super::fetch::deployment(client, ns, name).await?;
    from_deployment(client, ns, found(&got, ns, name, "the gate flags")?).await
}

/// nodegate's Deployment `namespace/name` as read, or the error that names
/// it and says to give `instead` instead of `--from-cluster`.
pub fn found<'a>(
    got: &'a Readable<Option<Deployment>>,
    namespace: &str,
    name: &str,
    instead: &str,
) -> Result<&'a Deployment> {
    let what = format!("Deployment {namespace}/{name}");
    match got {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(Error::invalid(
            what,
            format!(
                "not found: pass --namespace and --deployment naming nodegate's, or give \
                 {instead} instead of --from-cluster"
            ),
        )),
        Err(why) => Err(Error::invalid(what, why.clone())),
    }
}

/// A container's command and args, one word after another.
pub fn command_line(container: &Container) -> Vec<String> {
    let args = container.args.iter().flatten();
    let command = container.command.iter().flatten();
    command.chain(args).cloned().collect()
}

/// The words after `run` in a container's command and args: the flags
/// `nodegate run` was given there.
pub fn run_words(container: &Container) -> Option<Vec<String>> {
    let words = command_line(container);
    let at = words.iter().position(|w| w == "run")?;
    Some(words[at + 1..].to_vec())
}

/// `nodegate run WORDS`, parsed as the binary parses it; the error names
/// the bad flag or value.
pub fn parse_run(words: &[String]) -> std::result::Result<RunArgs, String> {
    let mut argv = vec!["nodegate".to_string(), "run".to_string()];
    argv.extend_from_slice(words);
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Run(args),
            ..
        }) => Ok(*args),
        Ok(_) => Err("not `nodegate run`".to_string()),
        Err(e) => Err(e.render().to_string().trim().to_string()),
    }
}

/// The ConfigMap and key a file at `path` in `container` is mounted from.
pub fn config_map_of(
    spec: &PodSpec,
    container: &Container,
    path: &str,
) -> Option<(String, String)> {
    let (mount, rest) = container.volume_mounts.iter().flatten().find_map(|m| {
        let rest = path.strip_prefix(m.mount_path.trim_end_matches('/'))?;
        Some((m, rest.strip_prefix('/')?.trim_start_matches('/')))
    })?;
    let rest = match &mount.sub_path {
        Some(sub) if !sub.is_empty() => format!("{sub}/{rest}").trim_end_matches('/').to_string(),
        _ => rest.to_string(),
    };
    let mut volumes = spec.volumes.iter().flatten();
    let volume = volumes.find(|v| v.name == mount.name)?;
    let cm = volume.config_map.as_ref()?;
    let key = match &cm.items {
        Some(items) => items.iter().find(|i| i.path == rest)?.key.clone(),
        None => rest,
    };
    Some((cm.name.clone(), key))
}

/// nodegate's settings from its Deployment `namespace/name`.
pub async fn from_deployment(
    client: &kube::Client,
    namespace: &str,
    d: &Deployment,
) -> Result<RunSettings> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let what = format!("Deployment {namespace}/{name}");
    let spec = d.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let spec = spec.ok_or_else(|| Error::invalid(what.clone(), "has no pod template"))?;
    // The container that runs nodegate: the one named `nodegate`, else the
    // first whose command and args hold `run`.
    let container = spec.containers.iter().find(|c| c.name == "nodegate");
    let container = container
        .or_else(|| spec.containers.iter().find(|c| run_words(c).is_some()))
        .ok_or_else(|| Error::invalid(what.clone(), "has no container running `nodegate run`"))?;
    let words = run_words(container)
        .ok_or_else(|| Error::invalid(what.clone(), "its container does not run `nodegate run`"))?;
    let mut args = parse_run(&words).map_err(|e| Error::invalid(format!("{what}'s args"), e))?;
    let file = match args.gate.config.take() {
        None => FileConfig::default(),
        Some(path) => {
            let path = path.display().to_string();
            let (cm, key) = config_map_of(spec, container, &path).ok_or_else(|| {
                Error::invalid(
                    format!("{what}'s --config {path}"),
                    "is not mounted from a ConfigMap: give nodegate's flags and --config here instead of --from-cluster",
                )
            })?;
            let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(&cm)
                .await
                .map_err(Error::kube(format!("reading ConfigMap {namespace}/{cm}")))?;
            let text = found
                .and_then(|c| c.data)
                .and_then(|mut data| data.remove(&key))
                .ok_or_else(|| {
                    Error::invalid(
                        format!("{what}'s --config {path}"),
                        format!("ConfigMap {namespace}/{cm} has no key {key:?}"),
                    )
                })?;
            FileConfig::parse(&text, &format!("ConfigMap {namespace}/{cm} key {key}"))
                .map_err(|e| Error::invalid(format!("{what}'s config file"), e.to_string()))?
        }
    };
    config::run_settings_from(&args, file)
        .map_err(|e| Error::invalid(format!("{what}'s settings"), e.to_string()))
}
