//! `[telemetry]`: OpenTelemetry trace export (OTLP over HTTP, JSON encoding). Off unless an
//! endpoint is configured. The endpoint is the collector's base URL (`http://HOST:4318`; spans
//! go to `/v1/traces` under it); `WARDEN_OTLP_ENDPOINT`, then the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, override the file. Headers (a collector's API key) come only
//! from the environment, as OpenTelemetry's `OTEL_EXPORTER_OTLP_HEADERS` spells them
//! (`key=value,key=value`), never from the file.

use anyhow::bail;
use warden_config::{Env, TelemetrySection};

/// Spans go to this path under the endpoint (OTLP/HTTP).
pub const TRACES_PATH: &str = "/v1/traces";
const DEFAULT_SERVICE_NAME: &str = "warden";

/// Where traces go; `None` from [`TelemetryConfig::resolve`] when export is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The full URL spans are POSTed to (the endpoint + [`TRACES_PATH`]).
    pub traces_url: String,
    pub service_name: String,
    /// Sent with every export; from `OTEL_EXPORTER_OTLP_HEADERS`.
    pub headers: Vec<(String, String)>,
}

impl TelemetryConfig {
    pub fn resolve(
        section: &TelemetrySection,
        env: &dyn Env,
    ) -> anyhow::Result<Option<TelemetryConfig>> {
        let endpoint = env
            .var("WARDEN_OTLP_ENDPOINT")
            .or_else(|| env.var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .or_else(|| section.otlp_endpoint.clone());
        let Some(endpoint) = endpoint else {
            return Ok(None);
        };
        let base =
            warden_service::config::chat::api_base_url("telemetry.otlp_endpoint", &endpoint)?;
        let service_name = section
            .service_name
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        if service_name.trim().is_empty() || service_name.len() > 100 {
            bail!("telemetry.service_name must be 1-100 characters");
        }
        let headers = match env.var("OTEL_EXPORTER_OTLP_HEADERS") {
            None => Vec::new(),
            Some(text) => parse_headers(&text)?,
        };
        Ok(Some(TelemetryConfig {
            traces_url: format!("{base}{TRACES_PATH}"),
            service_name,
            headers,
        }))
    }
}

/// `key=value,key=value` (values percent-decoded, as the OpenTelemetry specification says).
fn parse_headers(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut headers = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            bail!(
                "OTEL_EXPORTER_OTLP_HEADERS: {:?} is not key=value",
                key_of(pair)
            );
        };
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            bail!("OTEL_EXPORTER_OTLP_HEADERS: {key:?} is not a header name");
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "OTEL_EXPORTER_OTLP_HEADERS: the value of {key} is not valid percent-encoding"
            )
        })?;
        if value.chars().any(char::is_control) {
            bail!("OTEL_EXPORTER_OTLP_HEADERS: the value of {key} holds a control character");
        }
        headers.push((key.to_string(), value));
    }
    Ok(headers)
}

/// A pair's key, never its value (which may be a secret), for error messages.
fn key_of(pair: &str) -> &str {
    pair.split('=').next().unwrap_or_default()
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, &'static str)>);
    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn section(endpoint: Option<&str>) -> TelemetrySection {
        TelemetrySection {
            otlp_endpoint: endpoint.map(str::to_string),
            service_name: None,
        }
    }

    #[test]
    fn off_without_an_endpoint_and_the_environment_overrides_the_file() {
        assert_eq!(
            TelemetryConfig::resolve(&section(None), &Vars(vec![])).unwrap(),
            None
        );
        let file =
            TelemetryConfig::resolve(&section(Some("http://collector:4318/")), &Vars(vec![]))
                .unwrap()
                .unwrap();
        assert_eq!(file.traces_url, "http://collector:4318/v1/traces");
        assert_eq!(file.service_name, "warden");
        let env = Vars(vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=s%3Dcret, x-team = core",
            ),
        ]);
        let resolved = TelemetryConfig::resolve(&section(Some("http://collector:4318")), &env)
            .unwrap()
            .unwrap();
        assert_eq!(resolved.traces_url, "https://otel.example:4318/v1/traces");
        assert_eq!(
            resolved.headers,
            vec![
                ("api-key".to_string(), "s=cret".to_string()),
                ("x-team".to_string(), "core".to_string())
            ]
        );
    }

    #[test]
    fn bad_endpoints_and_headers_are_refused_without_showing_a_value() {
        for endpoint in [
            "collector:4318",
            "ftp://c",
            "http://user:pw@c:4318",
            "http://c?x=1",
        ] {
            let error = TelemetryConfig::resolve(&section(Some(endpoint)), &Vars(vec![]))
                .unwrap_err()
                .to_string();
            assert!(error.contains("telemetry.otlp_endpoint"), "{error}");
        }
        for headers in ["novalue", "bad key=v", "k=%zz", "k=a%0Ab"] {
            let env = Vars(vec![("OTEL_EXPORTER_OTLP_HEADERS", headers)]);
            let error = TelemetryConfig::resolve(&section(Some("http://c:4318")), &env)
                .unwrap_err()
                .to_string();
            assert!(error.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{error}");
            assert!(
                !error.contains("%zz") && !error.contains("a%0Ab"),
                "{error}"
            );
        }
    }
}
