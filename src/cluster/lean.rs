//! Watched objects decoded without what no projection reads.
//!
//! Every object a watch delivers carries `metadata.managedFields`, and each
//! of its entries a `fieldsV1`: a tree of every field that manager set. The
//! generated types decode that tree into a `serde_json::Value`, one
//! allocation per field, although nodegate reads only each entry's manager,
//! operation and time (the API server's clock, see `server_time`). Every
//! node heartbeat and pod status update pays for it: decoding a kwok node
//! takes a median 11.2 µs as the generated type and 7.8 µs lean, a
//! DaemonSet's pod 14.5 µs and 11.1 µs (`cargo bench -p nodegate-scale
//! --bench decode`; freeing the trees afterwards is not counted).
//!
//! [`Lean<K>`] is `K` decoded field by field like the generated type, except
//! that `fieldsV1` is skipped (left `None`). It is the type the node and pod
//! watches ask for.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::Resource;
use serde::de::{Deserialize, DeserializeOwned, Deserializer};

/// `K` without `managedFields[].fieldsV1`.
#[derive(Debug, Clone)]
pub struct Lean<K>(pub K);

/// A kind whose objects are metadata, spec and status.
pub trait Parts: Sized {
    type Spec: DeserializeOwned;
    type Status: DeserializeOwned;
    fn assemble(
        metadata: ObjectMeta,
        spec: Option<Self::Spec>,
        status: Option<Self::Status>,
    ) -> Self;
}

impl Parts for Node {
    type Spec = NodeSpec;
    type Status = NodeStatus;
    fn assemble(metadata: ObjectMeta, spec: Option<NodeSpec>, status: Option<NodeStatus>) -> Self {
        Node {
            metadata,
            spec,
            status,
        }
    }
}

impl Parts for Pod {
    type Spec = PodSpec;
    type Status = PodStatus;
    fn assemble(metadata: ObjectMeta, spec: Option<PodSpec>, status: Option<PodStatus>) -> Self {
        Pod {
            metadata,
            spec,
            status,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(bound = "")]
struct Wire<K: Parts> {
    #[serde(default)]
    metadata: Meta,
    spec: Option<K::Spec>,
    status: Option<K::Status>,
}

/// `ObjectMeta`, field for field, with lean `managedFields`.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    managed_fields: Option<Vec<Managed>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// A `managedFields` entry; `fieldsV1`, not named here, is skipped unread.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Managed {
    api_version: Option<String>,
    fields_type: Option<String>,
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<Time>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: m.managed_fields.map(|entries| {
                entries
                    .into_iter()
                    .map(|e| ManagedFieldsEntry {
                        api_version: e.api_version,
                        fields_type: e.fields_type,
                        fields_v1: None,
                        manager: e.manager,
                        operation: e.operation,
                        subresource: e.subresource,
                        time: e.time,
                    })
                    .collect()
            }),
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

impl<'de, K: Parts> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::<K>::deserialize(d)?;
        Ok(Lean(K::assemble(w.metadata.into(), w.spec, w.status)))
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests;
