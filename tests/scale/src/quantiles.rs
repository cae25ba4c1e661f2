//! `nodegate-quantiles FILE METRIC[{LABEL=VALUE,...}]...`: p50/p90/p99 (ms)
//! of histograms in a saved Prometheus `/metrics` page, interpolated within
//! buckets by the driver's own code (`metrics.rs`). Used to read nodegate's
//! own reaction and write times after a benchmark run (docs/benchmarks.md):
//!
//! ```sh
//! cargo run -q --release -p nodegate-scale --bin nodegate-quantiles -- page.txt \
//!   nodegate_reaction_seconds 'nodegate_write_wait_seconds{kind=untaint}'
//! ```

// Shared with the scale driver; this binary uses only part of it.
#[allow(dead_code)]
mod metrics;

use anyhow::{Context, bail};

/// `name{k=v,...}` → the family and the labels a series must have.
fn metric(arg: &str) -> anyhow::Result<(&str, Vec<(&str, &str)>)> {
    let Some((name, rest)) = arg.split_once('{') else {
        return Ok((arg, Vec::new()));
    };
    let labels = rest
        .strip_suffix('}')
        .with_context(|| format!("{arg:?}: labels must end with '}}'"))?;
    let having = labels
        .split(',')
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k, v.trim_matches('"')))
                .with_context(|| format!("{arg:?}: {l:?} is not LABEL=VALUE"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((name, having))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, metrics @ ..] = args.as_slice() else {
        bail!("usage: nodegate-quantiles FILE METRIC[{{LABEL=VALUE,...}}]...");
    };
    if metrics.is_empty() {
        bail!("usage: nodegate-quantiles FILE METRIC[{{LABEL=VALUE,...}}]...");
    }
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    for arg in metrics {
        let (name, having) = metric(arg)?;
        let buckets = metrics::buckets(&text, name, &having);
        if buckets.is_empty() {
            bail!("no buckets of {arg} in {file}");
        }
        match metrics::quantiles_between(&[], &buckets) {
            Some(q) => println!(
                "{arg}: n={} p50/p90/p99 ms = {:.1} / {:.1} / {:.1}",
                q.count, q.p50, q.p90, q.p99
            ),
            None => println!("{arg}: no observations"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn a_metric_argument_names_its_family_and_labels() {
        assert_eq!(metric("a_seconds").unwrap(), ("a_seconds", vec![]));
        assert_eq!(
            metric("a_seconds{kind=untaint,x=\"y\"}").unwrap(),
            ("a_seconds", vec![("kind", "untaint"), ("x", "y")])
        );
        assert!(metric("a_seconds{kind=untaint").is_err());
        assert!(metric("a_seconds{kind}").is_err());
    }
}
