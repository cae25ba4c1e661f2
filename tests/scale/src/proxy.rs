//! The counting proxy: how the benchmark knows what the controller under test
//! asked of the API server.
//!
//! kube-apiserver's `apiserver_request_total` has no client label (its labels
//! are verb, dry_run, group, version, resource, subresource, scope, component
//! and code), and deploy/local runs no audit log, so a controller's own
//! requests cannot be told apart from the scheduler's, kwok's or the DaemonSet
//! controller's there. Instead the controller gets a kubeconfig that points at
//! this plain-HTTP proxy on loopback; every request is forwarded unchanged
//! (body, query, Accept, User-Agent; watches are streamed chunk by chunk) to
//! the real API server with the admin credentials, and counted by verb,
//! resource, subresource and response code when the response head comes back.
//! The proxy adds one loopback hop to the controller's path, so its
//! latencies are if anything slightly worse than without it. It never changes
//! a request or a response.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::client::Body;
use serde::Serialize;
use tokio::net::TcpListener;

/// One kind of request, as the benchmark reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RequestKey {
    /// Kubernetes' verb: get, list, watch, create, update, patch, delete,
    /// deletecollection; `GET` etc. for non-resource paths.
    pub verb: String,
    /// `nodes`, `pods`, `daemonsets.apps`, ...; the path for non-resource
    /// requests such as `/version`.
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub code: u16,
}

#[derive(Default)]
pub struct Counts {
    pub requests: BTreeMap<RequestKey, u64>,
    pub user_agents: BTreeMap<String, u64>,
}

#[derive(Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards through `upstream`.
    pub async fn start(upstream: kube::Client) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on a loopback port for the counting proxy")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Mutex::new(Counts::default()));
        let proxy = Proxy {
            addr,
            counts: Arc::clone(&counts),
        };
        tokio::spawn(async move {
            loop {
                let (stream, _) = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("[scale] proxy: accept failed: {e}");
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let upstream = upstream.clone();
                let counts = Arc::clone(&counts);
                tokio::spawn(async move {
                    let service =
                        service_fn(move |req| forward(upstream.clone(), Arc::clone(&counts), req));
                    // A client closing its watch mid-stream ends here; not an error
                    // worth reporting.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(proxy)
    }

    /// A copy of the counts so far.
    pub fn snapshot(&self) -> (BTreeMap<RequestKey, u64>, BTreeMap<String, u64>) {
        let c = match self.counts.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        (c.requests.clone(), c.user_agents.clone())
    }

    /// A kubeconfig for the controller under test: this proxy, no credentials
    /// (the proxy adds the admin's), and the cluster's CA (`ca_data`, base64)
    /// as every real kubeconfig and service account carries one. The proxy
    /// speaks plain HTTP, so no client uses it; but without any CA kube-rs
    /// reads the host's whole trust store at start (about 145 roots here,
    /// 17.6 M instructions and their memory), which nodegate never does in
    /// a cluster.
    pub fn kubeconfig(&self, ca_data: Option<&str>) -> String {
        let ca = ca_data
            .map(|ca| format!("    certificate-authority-data: {ca}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: http://{}\n{ca}users:\n- name: bench\n  user: {{}}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    user: bench\ncurrent-context: bench\n",
            self.addr
        )
    }
}

/// The CA (base64, as a kubeconfig holds it) of the current context's cluster
/// in `kubeconfig`; `None` when it names none by value.
pub fn cluster_ca(kubeconfig: &std::path::Path) -> anyhow::Result<Option<String>> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let current = config.current_context.as_deref();
    let cluster = config
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == current)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.as_str());
    Ok(config
        .clusters
        .iter()
        .find(|c| Some(c.name.as_str()) == cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone()))
}

/// Headers that describe one hop, not the request.
fn hop_by_hop(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
            | "authorization"
    )
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (k, v) in from {
        if !hop_by_hop(k) {
            to.append(k.clone(), v.clone());
        }
    }
}

async fn forward(
    upstream: kube::Client,
    counts: Arc<Mutex<Counts>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let user_agent = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let (verb, resource, subresource) = classify(parts.method.as_str(), &path_and_query);
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(error_response(format!("reading the request body: {e}"))),
    };
    let mut builder = Request::builder()
        .method(parts.method.clone())
        .uri(path_and_query.as_str());
    if let Some(h) = builder.headers_mut() {
        copy_headers(&parts.headers, h);
    }
    let upstream_req = match builder.body(Body::from(bytes)) {
        Ok(r) => r,
        Err(e) => return Ok(error_response(format!("rebuilding the request: {e}"))),
    };
    let (code, response) = match upstream.send(upstream_req).await {
        Ok(resp) => {
            let (p, b) = resp.into_parts();
            let mut out = Response::builder().status(p.status);
            if let Some(h) = out.headers_mut() {
                copy_headers(&p.headers, h);
            }
            let code = p.status.as_u16();
            match out.body(b) {
                Ok(r) => (code, r),
                Err(e) => (502, error_response(format!("rebuilding the response: {e}"))),
            }
        }
        Err(e) => (502, error_response(format!("upstream: {e}"))),
    };
    let mut c = match counts.lock() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    *c.requests
        .entry(RequestKey {
            verb,
            resource,
            subresource,
            code,
        })
        .or_insert(0) += 1;
    *c.user_agents.entry(user_agent).or_insert(0) += 1;
    Ok(response)
}

fn error_response(message: String) -> Response<Body> {
    eprintln!("[scale] proxy: {message}");
    let mut r = Response::new(Body::from(Bytes::from(message.into_bytes())));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

/// (verb, resource, subresource) of a request, the way kube-apiserver's
/// request info resolver names them.
pub fn classify(method: &str, path_and_query: &str) -> (String, String, String) {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let watch_param = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return (method.to_string(), path.to_string(), String::new()),
    };
    // Strip the namespace scope; `namespaces` alone is a resource.
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    // The old `/watch/` path prefix.
    let (watch_prefix, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        other => (false, other),
    };
    let (resource, name, sub) = match rest {
        [] => return (method.to_string(), path.to_string(), String::new()),
        [r] => (*r, None, ""),
        [r, n] => (*r, Some(*n), ""),
        [r, n, s, ..] => (*r, Some(*n), *s),
    };
    let verb = match (method, name) {
        ("GET", _) if watch_prefix || watch_param => "watch",
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        (m, _) => m,
    };
    let resource = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    (verb.to_string(), resource, sub.to_string())
}

#[cfg(test)]
mod tests {
    use super::{classify, cluster_ca};

    /// The CA is the current context's cluster's, and the proxy's kubeconfig
    /// carries it to a client that reads it back.
    #[test]
    fn the_proxy_s_kubeconfig_carries_the_current_cluster_s_ca() {
        let dir = std::env::temp_dir().join(format!("scale-proxy-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let upstream = dir.join("upstream.kubeconfig");
        let cluster = |name: &str, ca: &str| {
            format!(
                "- name: {name}\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority-data: {ca}\n"
            )
        };
        let context =
            |name: &str| format!("- name: {name}\n  context:\n    cluster: {name}\n    user: u\n");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n{}{}contexts:\n{}{}current-context: second\nusers:\n- name: u\n  user: {{}}\n",
            cluster("first", "Rmlyc3Q="),
            cluster("second", "U2Vjb25k"),
            context("first"),
            context("second"),
        );
        std::fs::write(&upstream, text).expect("write");
        let ca = cluster_ca(&upstream).expect("reads");
        assert_eq!(ca.as_deref(), Some("U2Vjb25k"));

        let proxy = super::Proxy {
            addr: "127.0.0.1:8001".parse().expect("addr"),
            counts: Default::default(),
        };
        let ours = dir.join("proxy.kubeconfig");
        std::fs::write(&ours, proxy.kubeconfig(ca.as_deref())).expect("write");
        assert_eq!(
            cluster_ca(&ours).expect("reads").as_deref(),
            Some("U2Vjb25k")
        );
        std::fs::write(&ours, proxy.kubeconfig(None)).expect("write");
        assert_eq!(cluster_ca(&ours).expect("reads"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn c(m: &str, p: &str) -> (String, String, String) {
        classify(m, p)
    }

    fn k(v: &str, r: &str, s: &str) -> (String, String, String) {
        (v.into(), r.into(), s.into())
    }

    #[test]
    fn requests_are_named_like_the_api_server_names_them() {
        let cases = [
            ("GET", "/api/v1/nodes?limit=500", k("list", "nodes", "")),
            (
                "GET",
                "/api/v1/nodes?watch=true&resourceVersion=5",
                k("watch", "nodes", ""),
            ),
            ("GET", "/api/v1/nodes/n1", k("get", "nodes", "")),
            ("PATCH", "/api/v1/nodes/n1", k("patch", "nodes", "")),
            (
                "PUT",
                "/api/v1/nodes/n1/status",
                k("update", "nodes", "status"),
            ),
            (
                "GET",
                "/api/v1/pods?labelSelector=a&watch=1",
                k("watch", "pods", ""),
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                k("create", "events.events.k8s.io", ""),
            ),
            (
                "GET",
                "/apis/apps/v1/daemonsets?allowWatchBookmarks=true&watch=true",
                k("watch", "daemonsets.apps", ""),
            ),
            ("GET", "/api/v1/namespaces/ns1", k("get", "namespaces", "")),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                k("update", "leases.coordination.k8s.io", ""),
            ),
            ("GET", "/api/v1/watch/pods", k("watch", "pods", "")),
            ("GET", "/version", k("GET", "/version", "")),
            ("GET", "/api/v1", k("GET", "/api/v1", "")),
        ];
        for (m, p, want) in cases {
            assert_eq!(c(m, p), want, "{m} {p}");
        }
    }
}
