//! Where traces go and what they say about their source: `--otlp-endpoint`
//! and the standard `OTEL_*` variables, read once at start (docs/operations.md,
//! "Resource and environment variables"). OTLP over HTTP with protobuf only:
//! another protocol, or a compression, is refused at start rather than ignored.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::{Key, KeyValue};
use opentelemetry_http::HttpClient;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;

use crate::settings::config::ConfigError;

/// The path a base endpoint gets, as for `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub const TRACES_PATH: &str = "v1/traces";

/// How long one export request may take unless an `OTEL_*` timeout says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running exporter's configuration.
pub struct TraceConfig {
    pub exporter: opentelemetry_otlp::SpanExporter,
    pub resource: Resource,
    /// The URL spans are POSTed to.
    pub url: String,
}

fn invalid(source_: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        source_: source_.into(),
        message: message.into(),
    }
}

/// Checks a base endpoint: an `http://` or `https://` URL with a host.
pub fn check_endpoint(source_: &str, url: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| {
        invalid(format!("{source_} {url:?}"), format!("not a URL: {e}"))
    })?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(invalid(
            format!("{source_} {url:?}"),
            "must be an http:// or https:// URL with a host, e.g. http://otel-collector:4318",
        )),
    }
}

/// `base` with the traces path appended (`http://c:4318` →
/// `http://c:4318/v1/traces`).
pub fn traces_url(base: &str) -> String {
    format!("{}/{TRACES_PATH}", base.trim_end_matches('/'))
}

/// The URL traces go to, or `None` when tracing is off. `env` reads an
/// environment variable (empty counts as unset).
pub fn resolve_url(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let protocols = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ];
    if let Some((name, proto)) = protocols.into_iter().find_map(|n| Some((n, var(n)?)))
        && proto.trim() != "http/protobuf"
    {
        return Err(invalid(
            format!("{name}={proto:?}"),
            "nodegate exports traces as OTLP over HTTP with protobuf only: unset it or set http/protobuf (port 4318 on a collector)",
        ));
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ] {
        if let Some(c) = var(name).filter(|c| c.trim() != "none") {
            return Err(invalid(
                format!("{name}={c:?}"),
                "nodegate sends trace bodies uncompressed: unset it or set none",
            ));
        }
    }
    if let Some(base) = flag {
        check_endpoint("--otlp-endpoint", base)?;
        return Ok(Some(traces_url(base)));
    }
    let disabled = var("OTEL_TRACES_EXPORTER").is_some_and(|e| e.trim() == "none")
        || var("OTEL_SDK_DISABLED").is_some_and(|d| d.trim().eq_ignore_ascii_case("true"));
    if disabled {
        return Ok(None);
    }
    if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        // Used as it is, as the specification says for the per-signal one.
        check_endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)?;
        return Ok(Some(url));
    }
    if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        check_endpoint("OTEL_EXPORTER_OTLP_ENDPOINT", &base)?;
        return Ok(Some(traces_url(&base)));
    }
    Ok(None)
}

/// The export timeout: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else [`DEFAULT_TIMEOUT`].
pub fn resolve_timeout(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration, ConfigError> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ] {
        if let Some(v) = env(name).filter(|v| !v.trim().is_empty()) {
            return match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                _ => Err(invalid(
                    format!("{name}={v:?}"),
                    "must be a positive number of milliseconds, e.g. 10000",
                )),
            };
        }
    }
    Ok(DEFAULT_TIMEOUT)
}

/// The resource every span names: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads them, with `service.name`
/// `nodegate` when neither names a service, and `service.version` and
/// `service.instance.id` (`instance`) when they are not set.
pub fn resource(instance: &str) -> Resource {
    let from_env = Resource::builder().build();
    let has = |key: &'static str| from_env.get(&Key::from_static_str(key)).is_some();
    let mut extra = Vec::new();
    let named = from_env
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    if !named {
        extra.push(KeyValue::new("service.name", "nodegate"));
    }
    if !has("service.version") {
        extra.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    if !has("service.instance.id") {
        extra.push(KeyValue::new("service.instance.id", instance.to_string()));
    }
    Resource::builder().with_attributes(extra).build()
}

/// The exporter for `--otlp-endpoint` / the environment, or `None` when
/// tracing is off. Headers (`OTEL_EXPORTER_OTLP_HEADERS`,
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`) are read by the exporter itself.
pub fn from_settings(
    flag: Option<&str>,
    instance: &str,
) -> Result<Option<TraceConfig>, ConfigError> {
    let env = |name: &str| std::env::var(name).ok();
    let Some(url) = resolve_url(flag, &env)? else {
        return Ok(None);
    };
    let timeout = resolve_timeout(&env)?;
    let refused = |why: String| invalid(format!("--otlp-endpoint {url:?}"), why);
    let client: Arc<dyn HttpClient> = if url.starts_with("https://") {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| {
                refused(format!(
                    "cannot load the system's root certificates for https: {e}"
                ))
            })?
            .https_only()
            .enable_http1()
            .build();
        Arc::new(HyperClient::new(connector, timeout, None))
    } else {
        Arc::new(HyperClient::with_default_connector(timeout, None))
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_shared_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(timeout)
        .build()
        .map_err(|e| refused(format!("cannot set up the OTLP exporter: {e}")))?;
    Ok(Some(TraceConfig {
        exporter,
        resource: resource(instance),
        url,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn off_without_flag_or_variables() {
        assert_eq!(resolve_url(None, &env_of(&[])).unwrap(), None);
    }

    #[test]
    fn the_flag_is_a_base_url_and_wins_over_the_variables() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(
            resolve_url(Some("http://collector:4318/"), &env).unwrap(),
            Some("http://collector:4318/v1/traces".to_string())
        );
    }

    #[test]
    fn the_variables_turn_tracing_on_as_the_specification_says() {
        let base = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c.example:4318")]);
        assert_eq!(
            resolve_url(None, &base).unwrap().as_deref(),
            Some("https://c.example:4318/v1/traces")
        );
        let signal = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom"),
        ]);
        assert_eq!(
            resolve_url(None, &signal).unwrap().as_deref(),
            Some("http://t:4318/custom")
        );
        let none = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]);
        assert_eq!(resolve_url(None, &none).unwrap(), None);
    }

    #[test]
    fn bad_endpoints_and_protocols_are_refused_by_name() {
        let err = resolve_url(Some("collector:4318"), &env_of(&[])).unwrap_err();
        assert!(err.to_string().contains("--otlp-endpoint"), "{err}");
        let grpc = env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        let err = resolve_url(Some("http://c:4318"), &grpc).unwrap_err();
        assert!(
            err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
            "{err}"
        );
        let ok = env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
        assert!(resolve_url(Some("http://c:4318"), &ok).is_ok());
        let gzip = env_of(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]);
        let err = resolve_url(Some("http://c:4318"), &gzip).unwrap_err();
        assert!(err.to_string().contains("COMPRESSION"), "{err}");
    }

    #[test]
    fn timeout_from_the_variables_in_milliseconds() {
        assert_eq!(resolve_timeout(&env_of(&[])).unwrap(), DEFAULT_TIMEOUT);
        let t = env_of(&[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
        ]);
        assert_eq!(resolve_timeout(&t).unwrap(), Duration::from_millis(700));
        let bad = env_of(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]);
        assert!(resolve_timeout(&bad).is_err());
    }
}
