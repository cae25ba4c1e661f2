//! Admission: what puts nodegate's startup taint on a Node as it is
//! created. The MutatingAdmissionPolicy needs its binding, and the
//! parameters ConfigMap the binding names must say the same taints as
//! nodegate's `--taint`s and the binding must select the nodes
//! `--node-selector` selects; the webhook needs a Service with a ready
//! endpoint and a caBundle.

use nodegate_core::rules::selector::LabelSelector;

use crate::commands::doctor::report::{Check, Name};
use crate::settings::config::RunSettings;

pub const CHECK: Name = Name("admission");

/// The name of nodegate's webhook in a MutatingWebhookConfiguration.
pub const WEBHOOK_NAME: &str = "nodes.nodegate.dev";

/// A MutatingAdmissionPolicyBinding of nodegate's policy, with what its
/// parameters say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub policy: String,
    /// `spec.paramRef` as NAMESPACE/NAME.
    pub params_ref: Option<String>,
    /// The parameters ConfigMap's `startupTaint` and `managedTaints`;
    /// `None` when the ConfigMap is not there.
    pub params: Option<Params>,
    /// `spec.matchResources.objectSelector`, as nodegate reads selectors.
    pub object_selector: LabelSelector,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    /// `startupRules`: one `SELECTOR=KEY:EFFECT` a line.
    pub startup_rules: Option<String>,
    pub startup_taint: Option<String>,
    pub managed_taints: Option<String>,
    /// `dryRun`: `"true"` while nodegate runs with `--dry-run` (the policy
    /// then taints nothing).
    pub dry_run: Option<String>,
}

/// nodegate's webhook in one MutatingWebhookConfiguration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Webhook {
    pub configuration: String,
    /// `clientConfig.service` as NAMESPACE/NAME; `None` for a URL.
    pub service: Option<String>,
    pub url: Option<String>,
    pub ca_bundle: bool,
    /// Ready endpoints of the Service; `None` when the Service is not there.
    pub ready_endpoints: Option<usize>,
}

/// What the doctor found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    /// nodegate's MutatingAdmissionPolicies (those reading `managedTaints`
    /// from their parameters).
    pub policies: Vec<String>,
    pub bindings: Vec<Binding>,
    pub webhooks: Vec<Webhook>,
    /// The taints (`KEY:EFFECT`) a server-side dry-run Node CREATE came
    /// back with: `Err(why)` when it could not be made, `None` when there
    /// was nothing to probe (no policy or webhook, or no labels inside
    /// `--node-selector` to give the probe).
    pub probe: Option<Result<Vec<String>, String>>,
}

/// The `--taint`s, as the parameters write them.
fn taint_list(s: &RunSettings) -> Vec<String> {
    let regate = s.gate.regate.as_ref().map(|r| &r.taint);
    let taints = s.gate.placement.managed_taints.iter();
    let kept = taints.filter(|t| Some(*t) != regate);
    kept.map(ToString::to_string).collect()
}

pub fn check(s: &RunSettings, a: &Admission) -> Vec<Check> {
    if a.policies.is_empty() && a.webhooks.is_empty() {
        let net = "; the late-taint net (--taint-new-nodes) taints a node only after it is created";
        let net = if s.net.enabled { net } else { "" };
        return vec![CHECK.problem(
            "Node CREATE",
            format!(
                "no admission policy or webhook of nodegate's is installed: nothing puts the \
                 startup taint on a node as it registers{net}"
            ),
            "install the MutatingAdmissionPolicy (deploy/kustomize/base, or Helm \
             admission=policy) or the webhook (the kustomize webhook component, or Helm \
             admission=webhook); unless every node registers with the taint itself (the \
             kubelet's --register-with-taints, the node pool's taints)",
        )];
    }
    let mut out = Vec::new();
    for p in &a.policies {
        let bound: Vec<&Binding> = a.bindings.iter().filter(|b| b.policy == *p).collect();
        if bound.is_empty() {
            out.push(CHECK.problem(
                format!("MutatingAdmissionPolicy {p}"),
                "has no MutatingAdmissionPolicyBinding: it taints nothing",
                format!("apply the binding (spec.policyName: {p}) shipped beside it"),
            ));
        }
        out.extend(bound.into_iter().map(|b| binding(s, b)));
    }
    out.extend(a.webhooks.iter().map(webhook));
    out.extend(a.probe.as_ref().map(|p| answered(s, p)));
    out
}

/// Whether the API server, asked to create a Node (a dry run: nothing is
/// stored), puts one of nodegate's taints on it: the policy or the webhook
/// answers, whatever its objects look like.
pub fn answered(s: &RunSettings, probe: &Result<Vec<String>, String>) -> Check {
    let subject = "dry-run Node CREATE";
    let taints = match probe {
        Ok(t) => t,
        Err(why) => return CHECK.skipped(subject, format!("not checked: {why}")),
    };
    let want = taint_list(s);
    match taints.iter().find(|t| want.contains(t)) {
        Some(t) => CHECK.ok(subject, format!("came back with {t}: admission answers")),
        None => CHECK.problem(
            subject,
            format!(
                "came back with taints {taints:?}, none of nodegate's ({}): the policy or the \
                 webhook did not act (with failurePolicy Ignore its failures are silent), so new \
                 nodes register untainted",
                want.join(", ")
            ),
            "check the API server's log and, for the webhook, nodegate's; that the policy's \
             parameters and binding are in place (the lines above); a policy applied moments ago \
             takes a few seconds to be in effect",
        ),
    }
}

/// The binding's parameters are not there. nodegate writes them itself
/// (`--admission-params`) while a replica leads, so that nodegate down
/// never keeps new nodes closed: their absence means no replica leads, or
/// nodegate does not keep them.
fn params_absent(s: &RunSettings, subject: String, at: &str) -> Check {
    let (name, namespace) = match at.split_once('/') {
        Some((ns, name)) => (name, Some(ns)),
        None => (at, None),
    };
    match &s.admission_params {
        None => CHECK.problem(
            subject,
            format!(
                "its parameters ConfigMap {at} is not there, and nodegate runs without \
                 --admission-params, so nothing writes them: the policy adds no taint"
            ),
            format!(
                "run nodegate with --admission-params={at} (the kustomize base and the chart \
                 pass it in the policy mode)"
            ),
        ),
        Some(p)
            if p.name != name || (p.namespace.is_some() && p.namespace.as_deref() != namespace) =>
        {
            CHECK.problem(
                subject,
                format!(
                    "its parameters ConfigMap {at} is not there, and nodegate keeps another one \
                     (--admission-params {}{}): the policy adds no taint",
                    p.namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                    p.name
                ),
                format!(
                    "pass --admission-params={at}, or point the binding's paramRef at nodegate's"
                ),
            )
        }
        Some(_) => CHECK.problem(
            subject,
            format!(
                "its parameters ConfigMap {at} is not there: no nodegate replica leads (nodegate \
                 writes them once it leads and has synced, and they go with the leader's Pod), \
                 so new nodes register untainted until one does; if the late-taint net \
                 (--taint-new-nodes) runs, a leader taints them after creation"
            ),
            "see why no replica leads: kubectl -n NAMESPACE get pods,lease (an image that \
             cannot be pulled, a crash loop: kubectl logs --previous), then the nodegate rows \
             above",
        ),
    }
}

/// One policy binding against nodegate's settings.
pub fn binding(s: &RunSettings, b: &Binding) -> Check {
    let subject = format!("MutatingAdmissionPolicyBinding {}", b.name);
    let want = taint_list(s);
    let first = want.first().cloned().unwrap_or_default();
    let Some(params) = &b.params else {
        let at = b.params_ref.as_deref().unwrap_or("(no spec.paramRef)");
        if s.given.dry_run {
            // A trial writes no parameters: the policy taints nothing, as
            // it must (a node tainted now would never be opened).
            return CHECK.ok(
                subject,
                format!(
                    "dry run: nodegate writes no parameters (ConfigMap {at} is not there), so \
                     the policy taints no new node"
                ),
            );
        }
        return params_absent(s, subject, at);
    };
    let at = b.params_ref.as_deref().unwrap_or_default();
    let trial = params.dry_run.as_deref().map(str::trim) == Some("true");
    if s.given.dry_run && !trial {
        return CHECK.problem(
            subject,
            format!(
                "nodegate runs with --dry-run, but its parameters (ConfigMap {at}) say dryRun \
                 {:?}: the API server taints every new node, and a dry-run gate never opens it",
                params.dry_run.as_deref().unwrap_or("(unset)")
            ),
            format!(
                "a dry-run nodegate writes no parameters: these are another writer's (a live \
                 replica's go with its Pod); delete ConfigMap {at}, or set its data.dryRun to \
                 \"true\" (Helm renders no policy with config.dryRun)"
            ),
        );
    }
    if !s.given.dry_run && trial {
        return CHECK.problem(
            subject,
            format!(
                "its parameters (ConfigMap {at}) say dryRun \"true\", but nodegate runs live: \
                 the policy taints no new node"
            ),
            format!("set ConfigMap {at}'s data.dryRun to \"false\""),
        );
    }
    let startup = params.startup_taint.as_deref().map(str::trim);
    let managed = params.managed_taints.as_deref().unwrap_or_default();
    let managed = managed.split(',').map(str::trim).filter(|t| !t.is_empty());
    let mut managed: Vec<String> = managed.map(str::to_string).collect();
    managed.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    if startup != Some(first.as_str()) || managed != want_sorted {
        return CHECK.problem(
            subject,
            format!(
                "its parameters (ConfigMap {at}) say startupTaint {:?} and managedTaints {:?}, \
                 nodegate's --taint flags say {first:?} and {:?}: the policy and nodegate \
                 disagree on the taint",
                startup.unwrap_or_default(),
                params.managed_taints.as_deref().unwrap_or_default(),
                want.join(",")
            ),
            format!(
                "set ConfigMap {at}'s data to startupTaint: {first:?} and managedTaints: {:?} \
                 (Helm renders both from config.taints)",
                want.join(",")
            ),
        );
    }
    let rule_lines = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let want_rules = s.gate.startup.admission_rules();
    if rule_lines(params.startup_rules.as_deref().unwrap_or_default()) != rule_lines(&want_rules) {
        return CHECK.problem(
            subject,
            format!(
                "its parameters (ConfigMap {at}) say startupRules {:?}, nodegate's --taint-for \
                 and --autoscaler say {want_rules:?}: the policy would add another taint than \
                 nodegate's own entrances to some nodes",
                params.startup_rules.as_deref().unwrap_or_default()
            ),
            format!(
                "set ConfigMap {at}'s data startupRules to {want_rules:?} (Helm renders it from \
                 config.autoscalers and config.taintFor)"
            ),
        );
    }
    let scope = s.gate.scope.node_selector.clone().unwrap_or_default();
    if scope != b.object_selector {
        return CHECK.problem(
            subject,
            format!(
                "spec.matchResources.objectSelector selects {:?}, nodegate's --node-selector \
                 {:?}: nodes outside one of them are tainted and never opened, or never tainted",
                b.object_selector.to_string(),
                scope.to_string()
            ),
            "set the binding's spec.matchResources.objectSelector to the same selector as \
             --node-selector (Helm: admissionObjectSelector)",
        );
    }
    CHECK.ok(
        subject,
        format!(
            "adds {first} at Node CREATE; its parameters ({at}) match nodegate's --taint flags"
        ),
    )
}

/// nodegate's webhook in one configuration.
pub fn webhook(w: &Webhook) -> Check {
    let subject = format!("MutatingWebhookConfiguration {}", w.configuration);
    if !w.ca_bundle {
        return CHECK.problem(
            subject,
            format!("webhook {WEBHOOK_NAME} has no caBundle: the API server cannot verify it"),
            format!(
                "run nodegate with --webhook-cert-secret and --webhook-configuration={} (it \
                 writes the caBundle), or let cert-manager inject it",
                w.configuration
            ),
        );
    }
    let Some(service) = &w.service else {
        return CHECK.ok(
            subject,
            format!(
                "calls {} (a URL: not checked)",
                w.url.as_deref().unwrap_or("?")
            ),
        );
    };
    match w.ready_endpoints {
        None => CHECK.problem(
            subject,
            format!(
                "its Service {service} is not there: the API server cannot call the webhook and \
                 nodes register untainted"
            ),
            format!("create Service {service} selecting nodegate's pods on the webhook's port"),
        ),
        Some(0) => CHECK.problem(
            subject,
            format!(
                "its Service {service} has no ready endpoint: the webhook does not answer and \
                 nodes register untainted (failurePolicy Ignore) or cannot register (Fail)"
            ),
            "make nodegate's pods Ready and serving --webhook-addr on the Service's targetPort \
             (kubectl get endpointslices, kubectl logs of the pods)",
        ),
        Some(n) => CHECK.ok(
            subject,
            format!("webhook {WEBHOOK_NAME} through Service {service}: {n} ready endpoint(s)"),
        ),
    }
}
