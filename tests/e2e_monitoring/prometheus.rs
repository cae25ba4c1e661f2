//! The real Prometheus and promtool, built (once, cached) by
//! `deploy/local/build --prometheus`: a server bound to 127.0.0.1 scraping
//! one target, and its HTTP query API read with a plain GET.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{http_get, local_script, wait_for};

/// The directory holding `prometheus` and `promtool`, building them first
/// when the cache lacks them (a cold build takes minutes; parallel callers
/// wait for the first).
pub fn bin_dir() -> PathBuf {
    let out = Command::new(local_script("build"))
        .arg("--prometheus")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run deploy/local/build --prometheus: {e}"));
    assert!(
        out.status.success(),
        "deploy/local/build --prometheus failed ({}): no Prometheus for the monitoring tests\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for b in ["prometheus", "promtool"] {
        assert!(
            dir.join(b).is_file(),
            "deploy/local/build --prometheus printed {} without {b} in it",
            dir.display()
        );
    }
    dir
}

/// Runs `promtool ARGS` in `cwd`; panics with its output when it fails.
pub fn promtool(bin: &Path, cwd: &Path, args: &[&str]) -> Output {
    let out = Command::new(bin.join("promtool"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run promtool: {e}"));
    assert!(
        out.status.success(),
        "promtool {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A Prometheus server with its own storage in a temporary directory,
/// stopped (by its pid) when dropped.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    dir: tempfile::TempDir,
}

/// A free loopback port, for a server that cannot report the port it bound.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (host:port, path /metrics) every
    /// second as job `nodegate`, evaluating the rules in `rules_file` every
    /// second; returns once it answers ready.
    pub async fn start(bin: &Path, target: &str, rules_file: &Path) -> Prometheus {
        let mut dir = tempfile::tempdir().expect("temp dir for Prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: nodegate\n    static_configs:\n      - targets: ['{target}']\n",
                rules_file.display()
            ),
        )
        .expect("write prometheus.yml");
        // The config is checked by promtool first: a mistake here is named
        // as such, not as a server that never became ready.
        promtool(
            bin,
            dir.path(),
            &["check", "config", config.to_str().expect("utf-8 path")],
        );
        // The port is picked free, then bound by Prometheus: should another
        // process take it in between, Prometheus exits and is started again
        // on another.
        let log_path = dir.path().join("prometheus.log");
        for attempt in 1..=3 {
            let addr = format!("127.0.0.1:{}", free_port());
            let log = std::fs::File::create(&log_path).expect("create log");
            let child = Command::new(bin.join("prometheus"))
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start prometheus: {e}"));
            let mut p = Prometheus { child, addr, dir };
            let started = Instant::now();
            let deadline = started + Duration::from_secs(60);
            loop {
                if let Ok((200, _)) = http_get(&p.addr, "/-/ready").await {
                    eprintln!(
                        "[e2e monitoring] prometheus ready on {} in {:.1}s",
                        p.addr,
                        started.elapsed().as_secs_f64()
                    );
                    return p;
                }
                if !p.is_running() || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let logs = p.logs();
            let running = p.is_running();
            if attempt < 3 && !running && logs.contains("address already in use") {
                eprintln!("[e2e monitoring] {} was taken; another port", p.addr);
                let _ = p.child.wait();
                dir = std::mem::replace(&mut p.dir, tempfile::tempdir().expect("temp dir"));
                continue;
            }
            panic!(
                "prometheus did not become ready on {} within 60s (running: {}):\n{logs}",
                p.addr, running
            );
        }
        unreachable!("every attempt returns, retries or panics")
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log"))
            .unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// `GET path` on the API; the decoded JSON answer, whatever its status
    /// (an error answer carries `errorType` and `error`).
    pub async fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_get(&self.addr, path).await?;
        serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: status {status}, not JSON ({e}): {body}"))
    }

    /// An instant query at the present time: `Ok(result)` (the samples,
    /// possibly none) or `Err(Prometheus's error)` for one it refused.
    pub async fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let answer = self
            .api(&format!("/api/v1/query?query={}", url_encode(promql)))
            .await?;
        if answer["status"] != "success" {
            return Err(format!(
                "{}: {}",
                answer["errorType"].as_str().unwrap_or("error"),
                answer["error"].as_str().unwrap_or("(no message)")
            ));
        }
        let data = &answer["data"];
        Ok(match data["resultType"].as_str() {
            // A scalar or string is one value.
            Some("scalar") | Some("string") => vec![serde_json::json!({"value": data["result"]})],
            _ => data["result"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// Waits (polling) until `promql` returns at least one sample.
    pub async fn wait_for_data(&self, what: &str, promql: &str, within: Duration) {
        wait_for(what, within, || async {
            match self.query(promql).await {
                Ok(r) if !r.is_empty() => Ok(()),
                other => Err(format!("{promql} -> {other:?}")),
            }
        })
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = self.logs();
            let lines: Vec<&str> = logs.lines().collect();
            eprintln!(
                "---- prometheus log, last lines ----\n{}\n---- end of prometheus log ----",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// The sample values of a query result, as numbers (`NaN` included).
pub fn values(result: &[Value]) -> Vec<f64> {
    result
        .iter()
        .filter_map(|s| s["value"][1].as_str()?.parse().ok())
        .collect()
}

/// Percent-encodes a query-string value (RFC 3986 unreserved kept).
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[test]
fn url_encoding() {
    assert_eq!(
        url_encode("sum(x{a=\"b c\"}[5m]) > 0"),
        "sum%28x%7Ba%3D%22b%20c%22%7D%5B5m%5D%29%20%3E%200"
    );
}
