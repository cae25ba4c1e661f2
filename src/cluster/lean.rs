//! Watched objects decoded without what no projection reads: [`Lean<K>`],
//! the type the node and pod watches hand on. They decode it from JSON
//! only where an API server refuses protobuf (`protobuf`).
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

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
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

macro_rules! parts {
    ($($kind:ident($spec:ident, $status:ident)),*) => {$(
        impl Parts for $kind {
            type Spec = $spec;
            type Status = $status;
            fn assemble(metadata: ObjectMeta, spec: Option<$spec>, status: Option<$status>) -> Self {
                $kind { metadata, spec, status }
            }
        }
    )*};
}

parts!(Node(NodeSpec, NodeStatus), Pod(PodSpec, PodStatus));

#[derive(serde::Deserialize)]
#[serde(bound = "")]
struct Wire<K: Parts> {
    #[serde(default, with = "Meta")]
    metadata: ObjectMeta,
    spec: Option<K::Spec>,
    status: Option<K::Status>,
}

/// `ObjectMeta`, field for field, with lean `managedFields`.
#[derive(serde::Deserialize)]
#[serde(remote = "ObjectMeta", rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "managed")]
    managed_fields: Option<Vec<ManagedFieldsEntry>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// A `managedFields` entry; `fieldsV1` is skipped unread.
#[derive(serde::Deserialize)]
#[serde(remote = "ManagedFieldsEntry", rename_all = "camelCase")]
struct Managed {
    api_version: Option<String>,
    fields_type: Option<String>,
    #[serde(skip)]
    fields_v1: Option<FieldsV1>,
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<Time>,
}

/// `managedFields`, each entry as [`Managed`] reads it.
fn managed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<ManagedFieldsEntry>>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Entry(#[serde(with = "Managed")] ManagedFieldsEntry);
    let entries = Option::<Vec<Entry>>::deserialize(d)?;
    Ok(entries.map(|e| e.into_iter().map(|Entry(e)| e).collect()))
}

impl<'de, K: Parts> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::<K>::deserialize(d)?;
        Ok(Lean(K::assemble(w.metadata, w.spec, w.status)))
    }
}

macro_rules! forward {
    ($($name:ident),*) => {$(
        fn $name(dt: &Self::DynamicType) -> Cow<'_, str> {
            K::$name(dt)
        }
    )*};
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    forward!(kind, group, version, api_version, plural);
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests;
