//! Devices as gate members (semantics.md §6.8): [`CriticalResource`]
//! (`criticalResources`) and [`DraDriver`] (`draDrivers`), each judged from
//! the node's projection alone.

pub mod pools;
pub mod quantity;

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::rules::selector::{LabelSelector, SelectorError, check_label_key};
use crate::vocab::model::{NodeInfo, SliceInfo};

/// An extended resource the gate waits for, like a member: the node opens
/// only once its `status.allocatable[resource]` is more than zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriticalResource {
    /// The resource name, e.g. `nvidia.com/gpu`; also the member's name
    /// (`resource:nvidia.com/gpu`).
    pub resource: String,
    /// Which nodes wait for it; every gated node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

/// A DRA driver the gate waits for, like a member: the node opens only once
/// the driver has published at least one pool of ResourceSlices for it and
/// every such pool is complete ([`pools`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraDriver {
    /// The driver name (`spec.driver` of its ResourceSlices), e.g.
    /// `gpu.nvidia.com`; also the member's name (`dra:gpu.nvidia.com`).
    pub driver: String,
    /// Which nodes wait for it; every gated node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

fn applies(selector: Option<&LabelSelector>, node: &NodeInfo) -> bool {
    selector.is_none_or(|s| s.matches(&node.labels))
}

impl CriticalResource {
    /// Whether the gate waits for it on `node` at all.
    pub fn applies(&self, node: &NodeInfo) -> bool {
        applies(self.node_selector.as_ref(), node)
    }

    /// `Ok` with the allocatable amount when it is more than zero; else why
    /// not, in words for the journal, `explain` and `status`.
    pub fn judge(&self, node: &NodeInfo) -> Result<String, String> {
        let r = &self.resource;
        let Some(amount) = node.extended_allocatable.get(r) else {
            return Err(format!("the node reports no allocatable {r} yet"));
        };
        match quantity::sign(amount) {
            Ok(Ordering::Greater) => Ok(format!("allocatable {r}={amount}")),
            Ok(Ordering::Equal) => Err(format!(
                "allocatable {r} is {amount}, waiting for more than 0"
            )),
            Ok(Ordering::Less) => Err(format!(
                "allocatable {r} is {amount} (negative), waiting for more than 0"
            )),
            Err(e) => Err(format!(
                "allocatable {r} is {amount:?}, which is not a quantity ({e}); waiting for one more than 0"
            )),
        }
    }
}

impl DraDriver {
    /// Whether the gate waits for it on `node` at all.
    pub fn applies(&self, node: &NodeInfo) -> bool {
        applies(self.node_selector.as_ref(), node)
    }

    /// `Ok` with its complete pools; else why not, naming each incomplete
    /// pool and the slices it lacks.
    ///
    /// Only slices the node owns count (an ownerReference to the Node by
    /// name and UID, as a driver's kubelet plugin writes it): anyone who
    /// may create ResourceSlices could otherwise complete a pool, or leave
    /// one incomplete, for any node.
    pub fn judge(&self, node: &NodeInfo) -> Result<String, String> {
        let d = &self.driver;
        let (owned, foreign): (Vec<SliceInfo>, Vec<SliceInfo>) = node
            .resource_slices
            .iter()
            .filter(|s| s.driver == *d)
            .cloned()
            .partition(|s| !s.owner_uid.is_empty() && s.owner_uid == node.uid);
        let pools = pools::pools(&owned, d);
        if pools.is_empty() {
            let ignored = match foreign.len() {
                0 => String::new(),
                n => format!(
                    " ({n} of its slices for the node ignored: not owned by the node, by name and UID)"
                ),
            };
            return Err(format!(
                "DRA driver {d} has published no ResourceSlice for the node yet{ignored}"
            ));
        }
        let words = |ps: Vec<&pools::Pool>| {
            let ps: Vec<String> = ps.iter().map(ToString::to_string).collect();
            format!("DRA driver {d}: {}", ps.join("; "))
        };
        let incomplete: Vec<&pools::Pool> = pools.iter().filter(|p| !p.is_complete()).collect();
        if incomplete.is_empty() {
            Ok(words(pools.iter().collect()))
        } else {
            Err(words(incomplete))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("{name:?} is not an extended resource name: {why}")]
    Resource { name: String, why: String },
    #[error(
        "{name:?} is not a DRA driver name: a DNS subdomain of at most 63 characters (lower-case letters, digits, '-' and '.'), like gpu.nvidia.com"
    )]
    Driver { name: String },
    #[error("{name:?} is listed twice; list each once")]
    Duplicate { name: String },
    #[error("{name:?}: nodeSelector: {source}")]
    NodeSelector { name: String, source: SelectorError },
}

/// Where a [`DeviceError`] was found: the entry's index in its list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtEntry {
    pub index: usize,
    pub error: DeviceError,
}

/// Kubernetes' rule for an extended resource name: a qualified name (like a
/// label key) with a domain prefix, e.g. `nvidia.com/gpu`.
pub fn check_resource_name(name: &str) -> Result<(), DeviceError> {
    let bad = |why: String| DeviceError::Resource {
        name: name.to_string(),
        why,
    };
    check_label_key(name).map_err(bad)?;
    if !name.contains('/') {
        return Err(bad(
            "an extended resource has a domain prefix, like nvidia.com/gpu".to_string(),
        ));
    }
    Ok(())
}

/// The rules `criticalResources` must meet.
pub fn validate_resources(list: &[CriticalResource]) -> Result<(), AtEntry> {
    validate(
        list.iter()
            .map(|r| (r.resource.as_str(), r.node_selector.as_ref())),
        check_resource_name,
    )
}

/// The rules `draDrivers` must meet.
pub fn validate_drivers(list: &[DraDriver]) -> Result<(), AtEntry> {
    validate(
        list.iter()
            .map(|d| (d.driver.as_str(), d.node_selector.as_ref())),
        |name| match crate::rules::readiness::is_csi_driver_name(name) {
            true => Ok(()),
            false => Err(DeviceError::Driver { name: name.into() }),
        },
    )
}

fn validate<'a>(
    entries: impl Iterator<Item = (&'a str, Option<&'a LabelSelector>)>,
    check_name: impl Fn(&str) -> Result<(), DeviceError>,
) -> Result<(), AtEntry> {
    let mut seen = BTreeSet::new();
    for (index, (name, selector)) in entries.enumerate() {
        let at = |error| AtEntry { index, error };
        check_name(name).map_err(at)?;
        if !seen.insert(name) {
            return Err(at(DeviceError::Duplicate {
                name: name.to_string(),
            }));
        }
        if let Some(sel) = selector {
            sel.validate().map_err(|source| {
                at(DeviceError::NodeSelector {
                    name: name.to_string(),
                    source,
                })
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
