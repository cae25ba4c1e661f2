//! The config file's critical members as written (`criticalPods`,
//! `criticalConditions`) and the one selector shape every selector key of
//! the file accepts ([`FileSelector`]): kubectl's string syntax
//! (`gpu=true,pool in (a,b)`) or a Kubernetes LabelSelector map
//! (`matchLabels`, `matchExpressions`). Every struct here refuses unknown
//! keys, so a typo such as `matchLabel:` is an error rather than an empty
//! selector that matches every node.

use std::collections::{BTreeMap, BTreeSet};

use nodegate_core::rules::readiness::{CriticalPodEntry, CriticalPodEntryError};
use nodegate_core::rules::selector::{LabelSelector, LabelSelectorRequirement};
use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, invalid};

/// A selector as written in the file: a string in kubectl syntax, or a map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum FileSelector {
    Text(String),
    Map(StrictSelector),
}

/// A LabelSelector map, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StrictSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<StrictRequirement>,
}

/// One `matchExpressions` entry, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrictRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl<'de> Deserialize<'de> for FileSelector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Shape;
        impl<'de> serde::de::Visitor<'de> for Shape {
            type Value = FileSelector;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a label selector: a string such as \"gpu=true\", or a map with \
                     matchLabels and/or matchExpressions",
                )
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<FileSelector, E> {
                Ok(FileSelector::Text(s.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<FileSelector, E> {
                Ok(FileSelector::Text(String::new()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<FileSelector, A::Error> {
                StrictSelector::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(FileSelector::Map)
            }
        }
        d.deserialize_any(Shape)
    }
}

/// A flag's value: always the string form.
impl std::str::FromStr for FileSelector {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(FileSelector::Text(s.to_string()))
    }
}

impl FileSelector {
    /// The selector, checked; `at` names the key for the error. An empty
    /// string or map is the empty selector (it matches everything).
    pub fn resolve(&self, at: &str) -> Result<LabelSelector, ConfigError> {
        let sel = match self {
            FileSelector::Text(s) if s.trim().is_empty() => return Ok(LabelSelector::default()),
            FileSelector::Text(s) => LabelSelector::parse(s),
            FileSelector::Map(m) => {
                let sel = LabelSelector {
                    match_labels: m.match_labels.clone(),
                    match_expressions: m
                        .match_expressions
                        .iter()
                        .map(|r| LabelSelectorRequirement::new(&r.key, &r.operator, &r.values))
                        .collect(),
                };
                sel.validate().map(|()| sel)
            }
        };
        sel.map_err(|e| invalid(at, e.to_string()))
    }

    /// An optional node selector, [`resolve`](Self::resolve)d (`at` names
    /// it): absent, like empty, is every node (`None`).
    pub fn nodes(
        sel: Option<&FileSelector>,
        at: &str,
    ) -> Result<Option<LabelSelector>, ConfigError> {
        let sel = sel.map(|s| s.resolve(at)).transpose()?;
        Ok(sel.filter(|s| !s.is_empty()))
    }

    /// An entry's optional `nodeSelector` (`at` names the entry).
    pub fn entry_nodes(
        sel: Option<&FileSelector>,
        at: &str,
    ) -> Result<Option<LabelSelector>, ConfigError> {
        Self::nodes(sel, &format!("{at}.nodeSelector"))
    }
}

/// One `criticalPods` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCriticalPod {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    pub selector: Option<FileSelector>,
    pub node_selector: Option<FileSelector>,
}

/// One `criticalConditions` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCriticalCondition {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub node_selector: Option<FileSelector>,
}

/// `criticalPods`: each named once, each valid.
pub(super) fn critical_pods(
    raw: Vec<RawCriticalPod>,
) -> Result<Vec<CriticalPodEntry>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut critical = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let at = format!("criticalPods[{i}] ({})", r.name);
        if r.name.is_empty() {
            return Err(invalid(format!("criticalPods[{i}]"), "needs a name"));
        }
        let selector = r
            .selector
            .as_ref()
            .map(|s| s.resolve(&format!("{at}.selector")));
        let c = CriticalPodEntry {
            name: r.name.clone(),
            namespace: r.namespace.clone(),
            selector: selector.transpose()?.unwrap_or_default(),
            node_selector: FileSelector::entry_nodes(r.node_selector.as_ref(), &at)?,
        };
        if !names.insert(c.name.clone()) {
            return Err(invalid(at, "the name is used twice"));
        }
        c.validate().map_err(|e| match e {
            CriticalPodEntryError::NoNamespace { .. } => invalid(at, "needs a namespace"),
            CriticalPodEntryError::EmptySelector { .. } => invalid(
                at,
                "needs a non-empty selector (an empty one would match every pod)",
            ),
            CriticalPodEntryError::Selector { source, .. } => {
                invalid(format!("{at}.selector"), source.to_string())
            }
            CriticalPodEntryError::NodeSelector { source, .. } => {
                invalid(format!("{at}.nodeSelector"), source.to_string())
            }
        })?;
        critical.push(c);
    }
    Ok(critical)
}
