//! The trace backend of the trace e2e test: a real OpenTelemetry Collector
//! (deploy/local/build --otelcol, config deploy/local/otelcol.yaml) on a free
//! loopback port, writing what it receives as OTLP JSON lines to a file,
//! and that file read back as spans.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::Value;

use crate::support::{local_script, repo_root};

/// A running collector; stopped (by pid) when dropped.
pub struct Collector {
    child: Child,
    /// The base URL to give `--otlp-endpoint`.
    pub endpoint: String,
    file: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// One span as the collector wrote it.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub start: Timestamp,
    pub end: Timestamp,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    /// 2 is an error.
    pub status_code: i64,
    pub events: Vec<String>,
}

impl Span {
    pub fn attr(&self, key: &str) -> &str {
        self.attributes
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("span {} has no attribute {key}: {self:#?}", self.name))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Collector {
    /// Builds (or finds in the cache) the collector and starts it; returns
    /// once it accepts connections.
    pub fn start() -> Collector {
        let out = Command::new(local_script("build"))
            .arg("--otelcol")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/build --otelcol: {e}"));
        assert!(
            out.status.success(),
            "deploy/local/build --otelcol failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("otelcol");
        let dir = tempfile::tempdir().expect("temp dir for the collector");
        let file = dir.path().join("traces.jsonl");
        let log = dir.path().join("otelcol.log");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let out = std::fs::File::create(&log).expect("create the collector's log");
        let err = out.try_clone().expect("clone log handle");
        let child = Command::new(&bin)
            .arg("--config")
            .arg(repo_root().join("deploy/local/otelcol.yaml"))
            .env("OTELCOL_HTTP", &addr)
            .env("OTELCOL_FILE", &file)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut c = Collector {
            child,
            endpoint: format!("http://{addr}"),
            file,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&addr).is_err() {
            if Instant::now() > deadline || !matches!(c.child.try_wait(), Ok(None)) {
                panic!("the collector does not listen on {addr}:\n{}", c.logs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .flat_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("the collector wrote a line that is not JSON ({e}): {l}")
                });
                parse_request(&v)
            })
            .collect()
    }

    /// The spans of the trace whose root names `node`, root first; an
    /// error while there is none yet.
    pub fn trace_of(&self, node: &str) -> Result<Vec<Span>, String> {
        let spans = self.spans();
        let root = spans
            .iter()
            .find(|s| {
                s.parent_span_id.is_empty()
                    && s.attributes.get("k8s.node.name").map(String::as_str) == Some(node)
            })
            .ok_or_else(|| format!("no root span for {node} among {} spans", spans.len()))?
            .clone();
        let mut trace = vec![root.clone()];
        trace.extend(
            spans
                .into_iter()
                .filter(|s| s.trace_id == root.trace_id && s.span_id != root.span_id),
        );
        Ok(trace)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// OTLP JSON's unix nanoseconds (a string).
fn nanos(v: &Value, key: &str) -> Timestamp {
    let n: i128 = str_at(v, key)
        .parse()
        .unwrap_or_else(|e| panic!("{key} is not a number of nanoseconds ({e}): {v}"));
    Timestamp::from_nanosecond(n).unwrap_or_else(|e| panic!("{key} out of range ({e}): {v}"))
}

/// Attributes as strings (int values are strings in OTLP JSON already).
fn attributes(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|kv| {
            let value = kv.get("value").cloned().unwrap_or(Value::Null);
            let text = value
                .as_object()
                .and_then(|o| o.values().next())
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (str_at(kv, "key").to_string(), text)
        })
        .collect()
}

fn parse_request(v: &Value) -> Vec<Span> {
    let mut spans = Vec::new();
    for rs in v
        .get("resourceSpans")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let resource = attributes(rs.pointer("/resource/attributes"));
        for ss in rs
            .get("scopeSpans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for s in ss
                .get("spans")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                spans.push(Span {
                    trace_id: str_at(s, "traceId").to_string(),
                    span_id: str_at(s, "spanId").to_string(),
                    parent_span_id: str_at(s, "parentSpanId").to_string(),
                    name: str_at(s, "name").to_string(),
                    start: nanos(s, "startTimeUnixNano"),
                    end: nanos(s, "endTimeUnixNano"),
                    attributes: attributes(s.get("attributes")),
                    resource: resource.clone(),
                    status_code: s
                        .pointer("/status/code")
                        .and_then(Value::as_i64)
                        .unwrap_or(0),
                    events: s
                        .get("events")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|e| str_at(e, "name").to_string())
                        .collect(),
                });
            }
        }
    }
    spans
}
