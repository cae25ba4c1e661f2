//! What deploy/ ships, proven on the real API server (deploy/local): the
//! kustomize base and the rendered Helm chart pass server-side dry-run (and
//! Pod Security "restricted"), the chart renders the same objects as the
//! base, and nodegate runs a whole gate scenario — readiness, a deadline,
//! leader election with a failover — with nothing but a token of the
//! ServiceAccount that deploy/ creates, bound by deploy/'s RBAC. The same
//! token is checked to be refused what nodegate must never do, to reach the
//! admission webhook's one Secret and one webhook configuration and no
//! other, and to be held by the admission policy to adding or removing its
//! own taint and nodegate.dev/ annotations. The cert-manager variant is
//! compared both ways and dry-run without its CRD kinds.

use nodegate_e2e as support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, PostParams};
use nodegate::cluster::entrance::gated_since;
use nodegate::cluster::patch::add_taint;
use nodegate::cluster::project;
use nodegate_core::vocab::model::Taint;
use serde_json::{Value, json};
use support::{Nodegate, TestCluster, fake_node, repo_root, wait_for, wait_for_or};

const NS: &str = "nodegate-system";
const SA: &str = "nodegate";
const TAINT: &str = "nodegate.dev/initializing";
/// What `helm template` must be told to render the admission policy mode
/// (as `helm install` learns it from an API server that serves the kind).
const POLICY_API: &[&str] = &[
    "--api-versions",
    "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
];

// ---------------------------------------------------------------------------
// Tools: the cluster's own kubectl and the cached Helm build
// ---------------------------------------------------------------------------

/// The directory `deploy/local/build` prints for `flag`; panics with its
/// message when it cannot provide one.
fn build_dir(flag: &str) -> PathBuf {
    let out = Command::new(support::local_script("build"))
        .arg(flag)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run deploy/local/build {flag}: {e}"));
    assert!(
        out.status.success(),
        "deploy/local/build {flag} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The control plane's kubectl, its path asked of deploy/local/build once
/// per test binary (a bash script; this binary runs kubectl hundreds of
/// times).
fn kubectl_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_dir("--print-dir").join("kubectl"))
        .clone()
}

/// Helm from the version-keyed cache (built on first use), or, with
/// NODEGATE_LOCAL_BIN, from there or PATH; the test fails without one.
/// Asked once per test binary, as kubectl is.
fn helm_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_dir("--helm").join("helm")).clone()
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("writing to {}: {e}", program.display()));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", program.display()));
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn must(what: &str, o: Output) -> Output {
    assert!(o.ok, "{what} failed:\n{}\n{}", o.stdout, o.stderr);
    o
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut all = vec!["--kubeconfig", kubeconfig.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run(&kubectl_bin(), &all, stdin)
}

fn kustomize(dir: &str) -> String {
    must(
        &format!("kubectl kustomize {dir}"),
        run(&kubectl_bin(), &["kustomize", dir], None),
    )
    .stdout
}

fn helm_template(extra: &[&str]) -> String {
    let mut args = vec![
        "template",
        "nodegate",
        "deploy/helm/nodegate",
        "--namespace",
        NS,
    ];
    args.extend_from_slice(extra);
    must("helm template", run(&helm_bin(), &args, None)).stdout
}

/// The objects of a multi-document YAML stream (empty documents skipped).
fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{yaml}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn to_stream(objs: &[&Value]) -> String {
    objs.iter()
        .map(|o| serde_saphyr::to_string(o).expect("a JSON value is valid YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn kind_name(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the rendered objects"))
}

/// Applies `objs` with server-side dry-run and checks every one was accepted
/// and that Pod Security had nothing to say about any of them.
fn dry_run(cluster: &TestCluster, what: &str, objs: &[&Value]) {
    let out = must(
        &format!("{what}: kubectl apply --dry-run=server"),
        kubectl(
            &cluster.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&to_stream(objs)),
        ),
    );
    let accepted = out
        .stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(
        accepted,
        objs.len(),
        "{what}: every object must be accepted:\n{}",
        out.stdout
    );
    assert!(
        !out.stderr.contains("PodSecurity"),
        "{what}: the pods must pass Pod Security \"restricted\":\n{}",
        out.stderr
    );
    eprintln!("{what}: {accepted} objects pass server-side dry-run");
}

fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata.annotations.as_ref()?.get(key).cloned()
}

// The tests, by subject (their own files: together they are long).
#[path = "e2e_deploy/bounds.rs"]
mod bounds;
#[path = "e2e_deploy/down.rs"]
mod down;
#[path = "e2e_deploy/grants.rs"]
mod grants;
#[path = "e2e_deploy/manifests.rs"]
mod manifests;
#[path = "e2e_deploy/namespace.rs"]
mod namespace;
#[path = "e2e_deploy/policy.rs"]
mod policy;
#[path = "e2e_deploy/rbac.rs"]
mod rbac;
#[path = "e2e_deploy/real_node.rs"]
mod real_node;
#[path = "e2e_deploy/replace.rs"]
mod replace;
#[path = "e2e_deploy/schedule.rs"]
mod schedule;
#[path = "e2e_deploy/values.rs"]
mod values;
