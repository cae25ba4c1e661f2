//! kube-apiserver's own count of requests, `apiserver_request_total`, from
//! its /metrics endpoint: what the whole control plane asked during the
//! measurement (scheduler, DaemonSet controller, kwok and the controller under
//! test together), so the controller's share can be put next to it.
//!
//! The metric carries no client label (this module reports the label names it
//! found, so a reader can check on another Kubernetes version); per-client
//! numbers come from the counting proxy instead.
//!
//! Also how long kube-apiserver took to serve node PATCHes
//! (`apiserver_request_duration_seconds`, every client): a controller's
//! reaction time can never be shorter than its own patch, so this is the
//! floor the reaction is measured against.

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
    /// `apiserver_request_duration_seconds` of PATCH on nodes (not a
    /// subresource): cumulative count per bucket bound `le` (seconds, as the
    /// API server prints it), summed over the other labels.
    pub node_patch_buckets: BTreeMap<String, f64>,
}

/// Quantiles of a latency histogram, in milliseconds, interpolated linearly
/// within a bucket as Prometheus' `histogram_quantile` does.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BucketQuantiles {
    pub count: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
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

/// The labels of one sample: `name{labels} value` with the name stripped.
fn labels_and_value(rest: &str) -> Option<(BTreeMap<&str, &str>, f64)> {
    let (labels, value) = rest.rsplit_once('}')?;
    let value = value.trim().parse::<f64>().ok()?;
    let mut l: BTreeMap<&str, &str> = BTreeMap::new();
    // Label values here never contain `",`; a plain split is enough.
    for pair in labels.split("\",") {
        if let Some((k, v)) = pair.split_once("=\"") {
            l.insert(k.trim(), v.trim_end_matches('"'));
        }
    }
    Some((l, value))
}

/// Parses the `apiserver_request_total` samples and the node PATCH latency
/// buckets of a Prometheus text page.
pub fn parse(text: &str) -> Scrape {
    let mut out = Scrape::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("apiserver_request_duration_seconds_bucket{") {
            let Some((l, value)) = labels_and_value(rest) else {
                continue;
            };
            let node_patch = l.get("verb") == Some(&"PATCH")
                && l.get("resource") == Some(&"nodes")
                && l.get("group").copied().unwrap_or("").is_empty()
                && l.get("subresource").copied().unwrap_or("").is_empty();
            if node_patch && let Some(le) = l.get("le") {
                *out.node_patch_buckets.entry(le.to_string()).or_insert(0.0) += value;
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((l, value)) = labels_and_value(rest) else {
            continue;
        };
        out.label_names.extend(l.keys().map(|k| k.to_string()));
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

/// The node PATCH latency between two scrapes; `None` when there was none.
pub fn node_patch_latency(before: &Scrape, after: &Scrape) -> Option<BucketQuantiles> {
    let sorted = |m: &BTreeMap<String, f64>| {
        // Rust parses Prometheus' "+Inf" as infinity.
        let mut v: Vec<(f64, f64)> = m
            .iter()
            .filter_map(|(le, n)| Some((le.parse::<f64>().ok()?, *n)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    quantiles_between(
        &sorted(&before.node_patch_buckets),
        &sorted(&after.node_patch_buckets),
    )
}

/// The cumulative buckets of histogram `family` in a Prometheus text page,
/// summed over the samples whose labels include every pair of `having`, as
/// (upper bound in seconds, count), sorted by bound. (The webhook benchmark
/// reads its histograms with it; the scale driver reads its own in `parse`.)
#[allow(dead_code)]
pub fn buckets(text: &str, family: &str, having: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let prefix = format!("{family}_bucket{{");
    let mut by_bound: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines() {
        let Some((l, value)) = line.strip_prefix(&prefix).and_then(labels_and_value) else {
            continue;
        };
        if having.iter().all(|(k, v)| l.get(k) == Some(v))
            && let Some(le) = l.get("le")
        {
            *by_bound.entry(le.to_string()).or_insert(0.0) += value;
        }
    }
    let mut out: Vec<(f64, f64)> = by_bound
        .into_iter()
        .filter_map(|(le, n)| Some((le.parse::<f64>().ok()?, n)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Quantiles of the observations between two readings of the same
/// histogram ([`buckets`]); `None` when nothing was observed in between.
pub fn quantiles_between(before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<BucketQuantiles> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let earlier = before
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c);
            (le, n - earlier)
        })
        .collect();
    let count = delta.last().map(|(_, n)| *n)?;
    if count <= 0.0 {
        return None;
    }
    let q = |q: f64| quantile_ms(&delta, q * count);
    Some(BucketQuantiles {
        count,
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
    })
}

/// The value below which `rank` of the observations fall, in milliseconds;
/// in the `+Inf` bucket, the largest finite bound.
fn quantile_ms(buckets: &[(f64, f64)], rank: f64) -> f64 {
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, n) in buckets {
        if n >= rank {
            if le.is_infinite() {
                return lower * 1000.0;
            }
            let within = if n > below {
                (rank - below) / (n - below)
            } else {
                0.0
            };
            return (lower + within * (le - lower)) * 1000.0;
        }
        (lower, below) = (le, n);
    }
    lower * 1000.0
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

    /// Bucket lines as kube-apiserver v1.36.3 prints them (trimmed to the
    /// labels that matter and a few bounds).
    fn patch_buckets(counts: [f64; 4]) -> String {
        let mut page = String::new();
        for (le, n) in ["0.05", "0.1", "0.2", "+Inf"].iter().zip(counts) {
            page += &format!(
                "apiserver_request_duration_seconds_bucket{{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"nodes\",scope=\"resource\",subresource=\"\",verb=\"PATCH\",version=\"v1\",le=\"{le}\"}} {n}\n"
            );
            // Same bound for node status patches and pod patches: not counted.
            page += &format!(
                "apiserver_request_duration_seconds_bucket{{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"nodes\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1\",le=\"{le}\"}} 1000\n\
apiserver_request_duration_seconds_bucket{{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"PATCH\",version=\"v1\",le=\"{le}\"}} 1000\n"
            );
        }
        page
    }

    #[test]
    fn any_histogram_is_read_by_family_and_labels() {
        let page = "x_seconds_bucket{name=\"a\",le=\"0.001\"} 5\n\
x_seconds_bucket{name=\"a\",le=\"0.002\"} 9\n\
x_seconds_bucket{name=\"a\",le=\"+Inf\"} 10\n\
x_seconds_bucket{name=\"b\",le=\"0.001\"} 100\n\
x_seconds_count{name=\"a\"} 10\n";
        let a = buckets(page, "x_seconds", &[("name", "a")]);
        assert_eq!(a, vec![(0.001, 5.0), (0.002, 9.0), (f64::INFINITY, 10.0)]);
        let q = quantiles_between(&[], &a).expect("observations");
        assert_eq!(q.count, 10.0);
        // The 5th of 10 is the last in the first bucket: 1 ms.
        assert!((q.p50 - 1.0).abs() < 1e-9, "p50 {}", q.p50);
        // The 9th: the last of the four in (1, 2] ms.
        assert!((q.p90 - 2.0).abs() < 1e-9, "p90 {}", q.p90);
        assert_eq!(quantiles_between(&a, &a), None);
    }

    #[test]
    fn node_patch_latency_is_the_delta_of_node_patch_buckets_interpolated() {
        let before = parse(&patch_buckets([10.0, 10.0, 10.0, 10.0]));
        // 100 patches since: 20 under 50 ms, 60 more under 100 ms, 15 more
        // under 200 ms, 5 slower.
        let after = parse(&patch_buckets([30.0, 90.0, 105.0, 110.0]));
        let q = node_patch_latency(&before, &after).expect("patches happened");
        assert_eq!(q.count, 100.0);
        // The 50th is the 30th of the 60 in (50, 100] ms.
        assert!((q.p50 - 75.0).abs() < 1e-9, "p50 {}", q.p50);
        // The 90th is the 10th of the 15 in (100, 200] ms.
        assert!((q.p90 - 166.666_666_666).abs() < 1e-6, "p90 {}", q.p90);
        // The 99th is in +Inf: the largest finite bound.
        assert!((q.p99 - 200.0).abs() < 1e-9, "p99 {}", q.p99);
        assert_eq!(node_patch_latency(&after, &after), None);
    }
}
