//! RBAC: may nodegate's ServiceAccount do what nodegate does? Asked of the
//! API server with SubjectAccessReviews (the doctor's own rights say nothing
//! about nodegate's); when the doctor may not create those, not checked.

use crate::commands::doctor::report::{Check, Name};
use crate::settings::config::{RunSettings, WebhookCerts};

pub const CHECK: Name = Name("rbac");

/// One request nodegate makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// A subresource such as `status` (`nodes/status`).
    pub subresource: Option<&'static str>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Access {
    fn new(verb: &'static str, group: &'static str, resource: &'static str) -> Access {
        Access {
            verb,
            group,
            resource,
            subresource: None,
            namespace: None,
            name: None,
        }
    }

    fn within(mut self, namespace: &str, name: Option<&str>) -> Access {
        self.namespace = Some(namespace.to_string());
        self.name = name.map(str::to_string);
        self
    }

    /// `patch nodes`, `create events.events.k8s.io in default`, ...
    pub fn describe(&self) -> String {
        let resource = match (self.group, self.subresource) {
            ("", None) => self.resource.to_string(),
            ("", Some(sub)) => format!("{}/{sub}", self.resource),
            (g, None) => format!("{}.{g}", self.resource),
            (g, Some(sub)) => format!("{}.{g}/{sub}", self.resource),
        };
        let mut s = format!("{} {resource}", self.verb);
        if let Some(name) = &self.name {
            s.push_str(&format!(" {name}"));
        }
        if let Some(ns) = &self.namespace {
            s.push_str(&format!(" in {ns}"));
        }
        s
    }
}

/// The namespace nodegate records node Events in (Events about a Node, a
/// cluster-scoped object, go to `default`).
pub const EVENTS_NAMESPACE: &str = "default";

/// What nodegate running with these settings asks the API server for (with
/// `--webhook-cert-secret`, its Secret and the webhook configuration's
/// caBundle too).
pub fn required(s: &RunSettings, lease_namespace: &str) -> Vec<Access> {
    let mut out: Vec<Access> = [
        verbs("get list watch patch", "", "nodes"),
        verbs("list watch", "", "pods"),
        verbs("list watch", "apps", "daemonsets"),
        verbs("list watch", "storage.k8s.io", "csinodes"),
    ]
    .into_iter()
    .flatten()
    .collect();
    out.push(Access::new("create", "events.k8s.io", "events").within(EVENTS_NAMESPACE, None));
    if !s.gate.dra_drivers.is_empty() {
        // draDrivers: the ResourceSlice watch, which runs only with it.
        out.extend(verbs("list watch", "resource.k8s.io", "resourceslices"));
    }
    if s.given.node_condition {
        // --node-condition: the nodegate.dev/Open condition.
        out.push(Access {
            subresource: Some("status"),
            ..Access::new("patch", "", "nodes")
        });
    }
    if let Some(c) = &s.gate.canary {
        // canary: nodegate's own pods, in their namespace only.
        let pods = verbs("create delete list watch", "", "pods");
        out.extend(pods.map(|a| a.within(&c.core.namespace, None)));
    }
    if s.given.on_timeout == nodegate_core::vocab::config::OnTimeout::Replace {
        // --on-timeout=replace: find and delete a node's owner.
        out.extend(verbs("list delete", "karpenter.sh", "nodeclaims"));
        out.push(Access::new("delete", "cluster.x-k8s.io", "machines"));
    }
    let le = &s.leader_election;
    if le.enabled {
        let (group, lease) = ("coordination.k8s.io", Some(le.lease_name.as_str()));
        out.push(Access::new("create", group, "leases").within(lease_namespace, None));
        let named = verbs("get update list watch", group, "leases");
        out.extend(named.map(|a| a.within(lease_namespace, lease)));
    }
    if let Some(WebhookCerts::Managed {
        secret_namespace,
        secret_name,
        configuration,
        ..
    }) = s.webhook.as_ref().map(|w| &w.certs)
    {
        let secret = verbs("get update", "", "secrets");
        out.extend(secret.map(|a| a.within(secret_namespace, Some(secret_name))));
        let hooks = "mutatingwebhookconfigurations";
        out.extend(
            verbs("get patch", "admissionregistration.k8s.io", hooks).map(|a| Access {
                name: Some(configuration.clone()),
                ..a
            }),
        );
    }
    out
}

/// `resource` of `group`, once for each of the space-separated `verbs`.
fn verbs(
    verbs: &'static str,
    group: &'static str,
    resource: &'static str,
) -> impl Iterator<Item = Access> {
    verbs
        .split(' ')
        .map(move |v| Access::new(v, group, resource))
}

/// `answers`: each access and whether the API server allows it to
/// `account`; `None` when the doctor may not ask.
pub fn check(account: &str, answers: Option<&[(Access, bool)]>) -> Vec<Check> {
    let subject = format!("ServiceAccount {account}");
    let Some(answers) = answers else {
        return vec![CHECK.skipped(
            subject,
            "not checked: these credentials may not create SubjectAccessReviews",
        )];
    };
    let denied = answers.iter().filter(|(_, allowed)| !allowed);
    let denied: Vec<String> = denied.map(|(a, _)| a.describe()).collect();
    if denied.is_empty() {
        return vec![CHECK.ok(
            subject,
            format!("may do all {} things nodegate does", answers.len()),
        )];
    }
    vec![CHECK.problem(
        subject,
        format!("may not {}", denied.join(", ")),
        format!(
            "grant them to {account} (the shipped ClusterRole nodegate and Roles \
             nodegate-leader-election and nodegate-events have them: apply deploy/kustomize/base's \
             rbac.yaml, or check the Helm release's)"
        ),
    )]
}
