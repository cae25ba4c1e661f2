//! The config file's device keys (semantics.md §6.8), `criticalResources`
//! and `draDrivers`, each entry waited for like a member on the nodes its
//! `nodeSelector` matches. Every error names the entry, field and value.

use nodegate_core::rules::devices::{
    AtEntry, CriticalResource, DeviceError, DraDriver, validate_drivers, validate_resources,
};
use nodegate_core::rules::selector::LabelSelector;
use serde::Deserialize;

use super::{ConfigError, FileSelector, invalid};

/// One `criticalResources` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCriticalResource {
    #[serde(default)]
    pub resource: String,
    pub node_selector: Option<FileSelector>,
}

/// One `draDrivers` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDraDriver {
    #[serde(default)]
    pub driver: String,
    pub node_selector: Option<FileSelector>,
}

pub fn critical_resources(
    raw: Option<Vec<RawCriticalResource>>,
) -> Result<Vec<CriticalResource>, ConfigError> {
    entries(
        "criticalResources",
        "resource",
        raw,
        |r| (&r.resource, r.node_selector.as_ref()),
        |resource, node_selector| CriticalResource {
            resource,
            node_selector,
        },
        validate_resources,
    )
}

pub fn dra_drivers(raw: Option<Vec<RawDraDriver>>) -> Result<Vec<DraDriver>, ConfigError> {
    entries(
        "draDrivers",
        "driver",
        raw,
        |d| (&d.driver, d.node_selector.as_ref()),
        |driver, node_selector| DraDriver {
            driver,
            node_selector,
        },
        validate_drivers,
    )
}

/// One device key's entries (each its `field`, named by `read`, and a node
/// selector), made into the core's and checked by its `validate`.
fn entries<R, T>(
    key: &str,
    field: &str,
    raw: Option<Vec<R>>,
    read: impl Fn(&R) -> (&String, Option<&FileSelector>),
    make: impl Fn(String, Option<LabelSelector>) -> T,
    validate: impl Fn(&[T]) -> Result<(), AtEntry>,
) -> Result<Vec<T>, ConfigError> {
    let raw = raw.unwrap_or_default();
    let names: Vec<String> = raw.iter().map(|r| read(r).0.clone()).collect();
    let mut list = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let (name, selector) = read(r);
        list.push(make(
            name.clone(),
            FileSelector::entry_nodes(selector, &at(key, i, name))?,
        ));
    }
    validate(&list).map_err(|e| worded(key, field, &names, e))?;
    Ok(list)
}

/// `KEY[i] (NAME)`, or `KEY[i]` for an entry without a name.
fn at(key: &str, index: usize, name: &str) -> String {
    if name.is_empty() {
        format!("{key}[{index}]")
    } else {
        format!("{key}[{index}] ({name})")
    }
}

/// The core's error, said of the entry and field it is about.
fn worded(key: &str, field: &str, names: &[String], e: AtEntry) -> ConfigError {
    let name = names.get(e.index).map_or("", String::as_str);
    let entry = at(key, e.index, name);
    match e.error {
        DeviceError::NodeSelector { source, .. } => {
            invalid(format!("{entry}.nodeSelector"), source.to_string())
        }
        DeviceError::Duplicate { .. } => invalid(
            format!("{entry}.{field}"),
            format!("{name:?} is listed twice; list each {field} once"),
        ),
        other => invalid(format!("{entry}.{field}"), other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FileConfig, GateArgs, GateSettings, gate_settings};

    fn settings(yaml: &str) -> Result<GateSettings, String> {
        let mut file = FileConfig::parse(yaml, "c.yaml").map_err(|e| e.to_string())?;
        gate_settings(&GateArgs::default(), &mut file).map_err(|e| e.to_string())
    }

    #[test]
    fn the_documented_example_reads() {
        let s = settings(
            "criticalResources:\n- resource: nvidia.com/gpu\n  nodeSelector: nvidia.com/gpu.present=true\n\
             draDrivers:\n- driver: gpu.nvidia.com\n  nodeSelector: {matchLabels: {nvidia.com/gpu.present: \"true\"}}\n",
        )
        .unwrap();
        let [r] = &s.resources[..] else {
            panic!("{:?}", s.resources)
        };
        assert_eq!(r.resource, "nvidia.com/gpu");
        assert_eq!(
            r.node_selector.as_ref().map(ToString::to_string).as_deref(),
            Some("nvidia.com/gpu.present=true")
        );
        let [d] = &s.dra_drivers[..] else {
            panic!("{:?}", s.dra_drivers)
        };
        assert_eq!(d.driver, "gpu.nvidia.com");
        assert!(d.node_selector.is_some());
    }

    #[test]
    fn each_bad_entry_is_named_with_its_field_and_value() {
        for (yaml, wants) in [
            (
                "criticalResources:\n- resource: gpu\n",
                &[
                    "criticalResources[0] (gpu).resource",
                    "\"gpu\"",
                    "domain prefix",
                ][..],
            ),
            (
                "criticalResources:\n- resource: Nvidia.com/gpu\n",
                &[
                    "criticalResources[0] (Nvidia.com/gpu).resource",
                    "DNS subdomain",
                ],
            ),
            (
                "criticalResources:\n- {}\n",
                &["criticalResources[0].resource", "must not be empty"],
            ),
            (
                "criticalResources:\n- resource: a.io/x\n- resource: a.io/x\n",
                &["criticalResources[1] (a.io/x).resource", "twice"],
            ),
            (
                "criticalResources:\n- resource: a.io/x\n  nodeSelector: 'gpu in'\n",
                &["criticalResources[0] (a.io/x).nodeSelector"],
            ),
            (
                "criticalResources:\n- resource: a.io/x\n  nodeSelector: {matchLabel: {a: b}}\n",
                &["matchLabel"],
            ),
            ("criticalResources:\n- resorce: a.io/x\n", &["resorce"]),
            (
                "draDrivers:\n- driver: GPU_nvidia\n",
                &[
                    "draDrivers[0] (GPU_nvidia).driver",
                    "\"GPU_nvidia\"",
                    "DNS subdomain",
                ],
            ),
            (
                "draDrivers:\n- driver: gpu.nvidia.com\n- driver: gpu.nvidia.com\n",
                &["draDrivers[1] (gpu.nvidia.com).driver", "twice"],
            ),
            ("draDrivers:\n- {}\n", &["draDrivers[0].driver"]),
        ] {
            let e = settings(yaml).expect_err(yaml);
            for w in wants {
                assert!(e.contains(w), "{e:?} lacks {w:?} for\n{yaml}");
            }
        }
    }
}
