//! kube-apiserver's own count of requests, `apiserver_request_total`, from
//! its /metrics endpoint: what the whole control plane asked during the
//! measurement (scheduler, DaemonSet controller, kwok and the controller under
//! test together), so the controller's share can be put next to it.
//!
//! The metric carries no client label (this module reports the label names it
//! found, so a reader can check on another Kubernetes version); per-client
//! numbers come from the counting proxy instead.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Key {
    pub verb: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub code: String,
}

#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub counts: BTreeMap<Key, f64>,
    pub label_names: BTreeSet<String>,
}

pub async fn scrape(client: &kube::Client) -> anyhow::Result<Scrape> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client
        .request_text(req)
        .await
        .context("reading kube-apiserver /metrics")?;
    Ok(parse(&text))
}

/// Parses the `apiserver_request_total` samples of a Prometheus text page.
pub fn parse(text: &str) -> Scrape {
    let mut out = Scrape::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let mut l: BTreeMap<&str, &str> = BTreeMap::new();
        // Label values here never contain `",`; a plain split is enough.
        for pair in labels.split("\",") {
            if let Some((k, v)) = pair.split_once("=\"") {
                l.insert(k.trim(), v.trim_end_matches('"'));
                out.label_names.insert(k.trim().to_string());
            }
        }
        let group = l.get("group").copied().unwrap_or("");
        let resource = l.get("resource").copied().unwrap_or("");
        let key = Key {
            verb: l.get("verb").copied().unwrap_or("").to_string(),
            resource: if group.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}.{group}")
            },
            subresource: l.get("subresource").copied().unwrap_or("").to_string(),
            code: l.get("code").copied().unwrap_or("").to_string(),
        };
        *out.counts.entry(key).or_insert(0.0) += value;
    }
    out
}

/// after − before, dropping what did not move.
pub fn delta(before: &Scrape, after: &Scrape) -> BTreeMap<Key, f64> {
    after
        .counts
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.counts.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_totals_and_their_label_names() {
        let page = "# HELP apiserver_request_total x\n\
apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"nodes\",scope=\"resource\",subresource=\"\",verb=\"PATCH\",version=\"v1\"} 12\n\
apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"apps\",resource=\"daemonsets\",scope=\"namespace\",subresource=\"\",verb=\"POST\",version=\"v1\"} 3\n\
apiserver_request_duration_seconds_count{verb=\"GET\"} 5\n";
        let s = parse(page);
        assert_eq!(s.counts.len(), 2);
        let k = Key {
            verb: "PATCH".into(),
            resource: "nodes".into(),
            subresource: String::new(),
            code: "200".into(),
        };
        assert_eq!(s.counts[&k], 12.0);
        assert!(s.label_names.contains("verb"));
        assert!(!s.label_names.contains("user_agent"));
        let later = parse(&page.replace("} 12", "} 20"));
        assert_eq!(delta(&s, &later)[&k], 8.0);
        assert_eq!(delta(&s, &later).len(), 1);
    }
}
