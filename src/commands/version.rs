//! `nodegate version`: this binary's version and, with a reachable cluster,
//! the running controller's, found where it already says who it is: its
//! Lease holder's pod. Read from that pod's `/metrics` (through the API
//! server's pod proxy, which needs `get pods/proxy`), else from its image
//! tag. Nothing here writes.

use std::process::ExitCode;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde::Serialize;

use crate::commands::output;
use crate::error::{Error, Result};
use crate::settings::cli::{OutputFormat, VersionArgs};

/// How long `version` waits for the controller's /metrics.
const METRICS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What `nodegate version` prints (`-o json|yaml` as is).
#[derive(Debug, Clone, Serialize)]
pub struct Versions {
    pub client: String,
    /// `None` with `--client`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<Controller>,
}

/// The running controller, as the cluster shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Controller {
    /// `namespace/name` of the Lease read.
    pub lease: String,
    /// The Lease's holder; empty when released or absent.
    pub holder: String,
    /// When the holder last renewed (RFC 3339).
    pub renewed: Option<String>,
    /// The holder's pod, when the holder is one.
    pub pod: Option<String>,
    /// The controller's version, when it could be read.
    pub version: Option<String>,
    /// Where `version` came from: `metrics` or `image`.
    pub source: Option<&'static str>,
    /// Why something is missing, for a person.
    pub note: Option<String>,
}

pub async fn main(args: VersionArgs) -> Result<ExitCode> {
    let connection = output::connection(&args.cluster)?;
    let mut versions = Versions {
        client: env!("CARGO_PKG_VERSION").to_string(),
        controller: None,
    };
    // As kubectl's: the client's version is printed even when the cluster
    // cannot be asked; the error follows (exit status 1).
    let mut failure = None;
    if !args.client {
        let lease = &args.lease;
        let asked = async {
            let client = output::connect(&connection).await?;
            controller(&client, &lease.namespace, &lease.lease_name).await
        };
        match asked.await {
            Ok(c) => versions.controller = Some(c),
            Err(e) => failure = Some(e),
        }
    }
    let wide = args.output == OutputFormat::Wide;
    let text = output::encode(&versions, args.output, "the versions")?;
    let text = text.unwrap_or_else(|| render(&versions, wide));
    output::print(text.as_bytes(), "cannot write the versions")?;
    failure.map_or(Ok(ExitCode::SUCCESS), Err)
}

/// The text form: `Client: 0.1.0` and `Controller: …` lines.
pub fn render(v: &Versions, wide: bool) -> String {
    let mut out = format!("Client: {}\n", v.client);
    let Some(c) = &v.controller else {
        return out;
    };
    let version = c.version.as_deref().unwrap_or("unknown");
    let source = c.source.map(|s| format!(" (from its {s})"));
    let source = source.unwrap_or_default();
    out.push_str(&format!("Controller: {version}{source}\n"));
    if !c.holder.is_empty() {
        out.push_str(&format!("  Leader: {} (lease {})\n", c.holder, c.lease));
    }
    if wide && let Some(r) = &c.renewed {
        out.push_str(&format!("  Renewed: {r}\n"));
    }
    if let Some(note) = &c.note {
        out.push_str(&format!("  Note: {note}\n"));
    }
    out
}

/// Reads the Lease, then its holder's pod. A missing Lease, holder or pod
/// is an answer (a note), not an error; a refused or failed request is.
pub async fn controller(client: &kube::Client, namespace: &str, name: &str) -> Result<Controller> {
    let mut c = Controller {
        lease: format!("{namespace}/{name}"),
        ..Default::default()
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading lease {}", c.lease)))?;
    let Some(lease) = lease else {
        c.note = Some(format!(
            "no lease {}: no replica runs with --leader-elect there (give -n/--namespace and --lease-name as nodegate runs)",
            c.lease
        ));
        return Ok(c);
    };
    let spec = lease.spec.unwrap_or_default();
    c.holder = spec.holder_identity.unwrap_or_default();
    c.renewed = spec.renew_time.map(|t| t.0.to_string());
    if c.holder.is_empty() {
        c.note = Some("the lease is released: no replica leads now".into());
        return Ok(c);
    }
    let pod_name = holder_pod(&c.holder).to_string();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods
        .get_opt(&pod_name)
        .await
        .map_err(Error::kube(format!("reading pod {namespace}/{pod_name}")))?;
    let Some(pod) = pod else {
        c.note = Some(format!(
            "the leader {:?} is not a pod in {namespace} (a controller run outside the cluster)",
            c.holder
        ));
        return Ok(c);
    };
    c.pod = Some(pod_name.clone());
    // The port named `http` (the shipped manifests' metrics port), else 8080.
    let port = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("http"))
        .map_or(8080, |p| p.container_port);
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod_name}:{port}/proxy/metrics");
    // Neither a failed nor a slow /metrics is an error (a pod the API server
    // cannot reach must not hold the answer up): the image tag is the next
    // best thing.
    let request = http::Request::get(path).body(Vec::new()).ok();
    let asked = async {
        let text = client.request_text(request?);
        tokio::time::timeout(METRICS_WAIT, text).await.ok()?.ok()
    };
    let metrics = asked.await;
    (c.version, c.source) = match metrics.as_deref().and_then(build_info_version) {
        Some(v) => (Some(v), Some("metrics")),
        None => image_version(&pod).map(|v| (v, "image")).unzip(),
    };
    if c.version.is_none() {
        c.note = Some(format!(
            "cannot read pod {pod_name}'s /metrics nor an image tag"
        ));
    }
    Ok(c)
}

/// The pod name in a holder identity: everything before the last `_` (the
/// controller appends `_` and a random suffix).
pub fn holder_pod(holder: &str) -> &str {
    holder.rsplit_once('_').map_or(holder, |(pod, _)| pod)
}

/// `version` of `nodegate_build_info{…,version="X",…} 1`.
pub fn build_info_version(metrics: &str) -> Option<String> {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("nodegate_build_info{"))?;
    let (_, rest) = line.split_once("version=\"")?;
    let (version, _) = rest.split_once('"')?;
    Some(version.to_string())
}

/// The tag of the pod's nodegate container image (`…/nodegate:0.1.0`), or
/// of its only container.
pub fn image_version(pod: &Pod) -> Option<String> {
    let containers = &pod.spec.as_ref()?.containers;
    let container = containers
        .iter()
        .find(|c| c.name == "nodegate")
        .or_else(|| (containers.len() == 1).then(|| &containers[0]))?;
    let image = container.image.as_deref()?;
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    let (_, last) = image.rsplit_once('/').unwrap_or(("", image));
    let (_, tag) = last.split_once(':')?;
    Some(tag.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pod(image: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "nodegate".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_version_is_read_from_build_info_or_the_image_tag() {
        let m = "# HELP nodegate_build_info Always 1\nnodegate_build_info{version=\"1.2.3\"} 1\n";
        assert_eq!(build_info_version(m).as_deref(), Some("1.2.3"));
        assert_eq!(build_info_version("nodegate_up 1\n"), None);
        assert_eq!(
            image_version(&pod("ghcr.io/nodegate/nodegate:0.4.0")).as_deref(),
            Some("0.4.0")
        );
        assert_eq!(
            image_version(&pod("localhost:5000/nodegate:dev@sha256:ab")).as_deref(),
            Some("dev")
        );
        assert_eq!(image_version(&pod("localhost:5000/nodegate")), None);
    }

    #[test]
    fn the_pod_is_the_holder_without_its_suffix() {
        assert_eq!(
            holder_pod("nodegate-7d9f-abcde_0badf00d"),
            "nodegate-7d9f-abcde"
        );
        assert_eq!(holder_pod("plain"), "plain");
    }
}
