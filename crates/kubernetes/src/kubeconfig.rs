//! Credentials: the in-cluster service account, or a kubeconfig file. A kubeconfig is read as
//! JSON or as the block YAML kubectl, kind and cloud CLIs write (mappings, sequences of mappings,
//! plain and quoted scalars, `{}` and `[]`); anything fancier (anchors, multi-line scalars, flow
//! collections with content) is refused with the `kubectl config view --raw --minify --flatten
//! -o json` line that makes a file this reader takes. Tokens and client certificates are
//! supported; `exec` and `auth-provider` plugins are not (Warden runs no program to get a
//! credential), and neither is `insecure-skip-tls-verify`.

use crate::http::{Auth, Endpoint};
use crate::{ClientError, Credentials};
use base64::Engine as _;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The endpoint the credentials describe.
pub(crate) fn endpoint(
    credentials: &Credentials,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Endpoint, ClientError> {
    match credentials {
        Credentials::InCluster => in_cluster(env),
        Credentials::Kubeconfig { path, context } => from_kubeconfig(path, context.as_deref()),
    }
}

fn in_cluster(env: &dyn Fn(&str) -> Option<String>) -> Result<Endpoint, ClientError> {
    let host = env("KUBERNETES_SERVICE_HOST").ok_or_else(|| {
        ClientError::Credentials(
            "in-cluster credentials need KUBERNETES_SERVICE_HOST (Warden is not running in a \
             pod?); set [kubernetes] kubeconfig otherwise"
                .into(),
        )
    })?;
    let port = env("KUBERNETES_SERVICE_PORT")
        .and_then(|p| p.parse().ok())
        .unwrap_or(443);
    let ca = read(&Path::new(SERVICE_ACCOUNT).join("ca.crt"))?;
    Ok(Endpoint {
        host: host.trim_matches(['[', ']']).to_string(),
        port,
        tls: Some(tls_config(&ca, None)?),
        auth: Auth::TokenFile(Path::new(SERVICE_ACCOUNT).join("token")),
        connect_timeout: Duration::from_secs(10),
        read_timeout: Duration::from_secs(60),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path)
        .map_err(|e| ClientError::Credentials(format!("cannot read {}: {e}", path.display())))
}

fn from_kubeconfig(path: &Path, context: Option<&str>) -> Result<Endpoint, ClientError> {
    let bad = |what: String| ClientError::Credentials(format!("{}: {what}", path.display()));
    let text = String::from_utf8(read(path)?).map_err(|_| bad("not UTF-8".into()))?;
    let config = parse(&text).map_err(&bad)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let context_name = match context {
        Some(name) => name.to_string(),
        None => config["current-context"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("no current-context; set [kubernetes] context".into()))?
            .to_string(),
    };
    let named = |list: &str, name: &str, inner: &str| -> Result<Value, ClientError> {
        config[list]
            .as_array()
            .and_then(|items| items.iter().find(|item| item["name"] == name))
            .map(|item| item[inner].clone())
            .ok_or_else(|| bad(format!("no {inner} named {name:?} in {list}")))
    };
    let context = named("contexts", &context_name, "context")?;
    let cluster_name = context["cluster"].as_str().unwrap_or_default();
    let cluster = named("clusters", cluster_name, "cluster")?;
    let user_name = context["user"].as_str().unwrap_or_default();
    let user = if user_name.is_empty() {
        Value::Object(Map::new())
    } else {
        named("users", user_name, "user")?
    };
    if cluster["insecure-skip-tls-verify"] == Value::Bool(true) {
        return Err(bad(
            "insecure-skip-tls-verify is refused: give the cluster's certificate-authority".into(),
        ));
    }
    for plugin in ["exec", "auth-provider"] {
        if !user[plugin].is_null() {
            return Err(bad(format!(
                "user {user_name:?} gets its credential from an {plugin} plugin, which Warden \
                 does not run: use a service-account token (kubectl create token) or a client \
                 certificate"
            )));
        }
    }
    let data = |map: &Value, key: &str| -> Result<Option<Vec<u8>>, ClientError> {
        if let Some(encoded) = map[format!("{key}-data")].as_str() {
            return base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map(Some)
                .map_err(|e| bad(format!("{key}-data: {e}")));
        }
        match map[key].as_str() {
            Some(file) => read(&resolve(&base, file)).map(Some),
            None => Ok(None),
        }
    };
    let server = cluster["server"]
        .as_str()
        .ok_or_else(|| bad(format!("cluster {cluster_name:?} has no server")))?;
    let (https, rest) = match server.split_once("://") {
        Some(("https", rest)) => (true, rest),
        Some(("http", rest)) => (false, rest),
        _ => return Err(bad(format!("server {server:?} is not an http(s) URL"))),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if rest.trim_end_matches('/') != authority {
        return Err(bad(format!(
            "server {server:?} has a path; only https://host[:port] is supported"
        )));
    }
    let (host, port) = split_authority(authority, if https { 443 } else { 80 })
        .ok_or_else(|| bad(format!("server {server:?}: bad host or port")))?;
    let identity = match (
        data(&user, "client-certificate")?,
        data(&user, "client-key")?,
    ) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(bad(
                "a client certificate needs its key, and a key its certificate".into(),
            ))
        }
    };
    let auth = match (user["token"].as_str(), user["tokenFile"].as_str()) {
        (Some(token), _) => Auth::Token(token.to_string()),
        (None, Some(file)) => Auth::TokenFile(resolve(&base, file)),
        (None, None) => Auth::None,
    };
    let tls = if https {
        let ca = data(&cluster, "certificate-authority")?.ok_or_else(|| {
            bad(format!(
                "cluster {cluster_name:?} names no certificate-authority"
            ))
        })?;
        Some(tls_config(&ca, identity)?)
    } else {
        None
    };
    Ok(Endpoint {
        host,
        port,
        tls,
        auth,
        connect_timeout: Duration::from_secs(10),
        read_timeout: Duration::from_secs(60),
    })
}

fn resolve(base: &Path, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().ok()?)),
        None if !authority.is_empty() => Some((authority.to_string(), default_port)),
        None => None,
    }
}

/// TLS trusting only the cluster's CA, with a client certificate when given.
fn tls_config(
    ca_pem: &[u8],
    identity: Option<(Vec<u8>, Vec<u8>)>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fail = |what: String| ClientError::Credentials(what);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| fail(format!("the cluster CA: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| fail(format!("the cluster CA: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail("the cluster CA holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| fail(format!("the client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| fail(format!("the client key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| fail(format!("the client certificate: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// A kubeconfig's text as a JSON value: JSON itself, or block YAML.
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"));
    }
    let lines: Vec<(usize, &str, usize)> = text
        .lines()
        .enumerate()
        .filter_map(|(number, line)| {
            let content = strip_comment(line);
            let trimmed = content.trim_end();
            if trimmed.trim().is_empty() || trimmed.trim() == "---" {
                return None;
            }
            let indent = trimmed.len() - trimmed.trim_start().len();
            Some((indent, trimmed.trim_start(), number + 1))
        })
        .collect();
    let mut at = 0;
    let value = block(&lines, &mut at, 0)?;
    if at != lines.len() {
        return Err(unsupported(lines[at].2));
    }
    Ok(value)
}

fn unsupported(line: usize) -> String {
    format!(
        "line {line}: YAML this reader does not take; write the file as JSON with `kubectl \
         config view --raw --minify --flatten -o json`"
    )
}

fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && previous.is_whitespace() => return &line[..i],
            None => {}
        }
        previous = c;
    }
    line
}

fn block(lines: &[(usize, &str, usize)], at: &mut usize, indent: usize) -> Result<Value, String> {
    let Some(&(first_indent, first, _)) = lines.get(*at) else {
        return Ok(Value::Null);
    };
    if first_indent < indent {
        return Ok(Value::Null);
    }
    let indent = first_indent;
    if first.starts_with("- ") || first == "-" {
        let mut items = Vec::new();
        while let Some(&(line_indent, text, number)) = lines.get(*at) {
            if line_indent != indent || !(text.starts_with("- ") || text == "-") {
                if line_indent > indent {
                    return Err(unsupported(number));
                }
                break;
            }
            let rest = text[1..].trim_start();
            *at += 1;
            if rest.is_empty() {
                items.push(block(lines, at, indent + 1)?);
            } else if is_mapping_line(rest) {
                // The item's first key sits after the dash; the others line up with it.
                let item_indent = indent + (text.len() - rest.len());
                let mut map = Map::new();
                mapping_entry(lines, at, item_indent, rest, number, &mut map)?;
                mapping_rest(lines, at, item_indent, &mut map)?;
                items.push(Value::Object(map));
            } else {
                items.push(scalar(rest, number)?);
            }
        }
        return Ok(Value::Array(items));
    }
    let mut map = Map::new();
    mapping_rest(lines, at, indent, &mut map)?;
    Ok(Value::Object(map))
}

fn mapping_rest(
    lines: &[(usize, &str, usize)],
    at: &mut usize,
    indent: usize,
    map: &mut Map<String, Value>,
) -> Result<(), String> {
    while let Some(&(line_indent, text, number)) = lines.get(*at) {
        if line_indent < indent {
            break;
        }
        if line_indent > indent || !is_mapping_line(text) {
            return Err(unsupported(number));
        }
        *at += 1;
        mapping_entry(lines, at, indent, text, number, map)?;
    }
    Ok(())
}

fn is_mapping_line(text: &str) -> bool {
    key_split(text).is_some()
}

fn key_split(text: &str) -> Option<(String, &str)> {
    if let Some(quote) = text.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = text[1..].find(quote)? + 1;
        let rest = text[end + 1..].strip_prefix(':')?;
        return Some((text[1..end].to_string(), rest));
    }
    let colon = text
        .find(": ")
        .or_else(|| text.ends_with(':').then(|| text.len() - 1))?;
    Some((text[..colon].to_string(), &text[colon + 1..]))
}

fn mapping_entry(
    lines: &[(usize, &str, usize)],
    at: &mut usize,
    indent: usize,
    text: &str,
    number: usize,
    map: &mut Map<String, Value>,
) -> Result<(), String> {
    let (key, rest) = key_split(text).ok_or_else(|| unsupported(number))?;
    let rest = rest.trim();
    let value = if rest.is_empty() {
        match lines.get(*at) {
            // A sequence may sit at the key's own indentation.
            Some(&(next, text, _))
                if next > indent || (next == indent && text.starts_with('-')) =>
            {
                block(lines, at, next)?
            }
            _ => Value::Null,
        }
    } else {
        scalar(rest, number)?
    };
    map.insert(key, value);
    Ok(())
}

fn scalar(text: &str, number: usize) -> Result<Value, String> {
    match text {
        "{}" => return Ok(Value::Object(Map::new())),
        "[]" => return Ok(Value::Array(Vec::new())),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        "null" | "~" => return Ok(Value::Null),
        _ => {}
    }
    if text.starts_with('"') {
        return serde_json::from_str::<String>(text)
            .map(Value::String)
            .map_err(|_| unsupported(number));
    }
    if let Some(inner) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        return Ok(Value::String(inner.replace("''", "'")));
    }
    if text.starts_with(['{', '[', '&', '*', '!', '|', '>', '%', '@', '`']) {
        return Err(unsupported(number));
    }
    if let Ok(n) = text.parse::<i64>() {
        return Ok(Value::from(n));
    }
    Ok(Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: QUJD
    server: https://127.0.0.1:40123
  name: kind-warden
contexts:
- context:
    cluster: kind-warden
    user: kind-warden
  name: kind-warden
current-context: kind-warden  # the one in use
kind: Config
preferences: {}
users:
- name: kind-warden
  user:
    token: \"abc#def\"
";

    #[test]
    fn kind_style_yaml_reads_like_its_json() {
        let value = parse(KIND).unwrap();
        assert_eq!(value["current-context"], "kind-warden");
        assert_eq!(
            value["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:40123"
        );
        assert_eq!(value["users"][0]["user"]["token"], "abc#def");
        assert_eq!(value["preferences"], serde_json::json!({}));
        assert_eq!(value["contexts"][0]["name"], "kind-warden");
    }

    #[test]
    fn what_it_cannot_read_is_refused_with_the_json_way_out() {
        for text in ["a: |\n  x\n", "a: &x 1\n", "a:\n  - 1\n   b: 2\n"] {
            let error = parse(text).unwrap_err();
            assert!(error.contains("-o json"), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_plain_http_fake_with_a_token_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let file = dir.path().join("config");
        std::fs::write(
            &file,
            "clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:8001\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: me\n\
             users:\n- name: me\n  user:\n    tokenFile: token\ncurrent-context: fake\n",
        )
        .unwrap();
        let endpoint = from_kubeconfig(&file, None).unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), ("127.0.0.1", 8001));
        assert!(endpoint.tls.is_none());
        assert_eq!(
            endpoint.auth.header().unwrap().as_deref(),
            Some("Bearer s3cret")
        );
        let error = from_kubeconfig(&file, Some("other"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no context named \"other\""), "{error}");
    }

    #[test]
    fn plugins_and_skipped_verification_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        for (user, cluster, words) in [
            ("exec: {}", "server: https://a", "exec plugin"),
            (
                "token: x",
                "insecure-skip-tls-verify: true\n    server: https://a",
                "insecure",
            ),
        ] {
            std::fs::write(
                &file,
                format!(
                    "clusters:\n- name: c\n  cluster:\n    {cluster}\ncontexts:\n- name: c\n  \
                     context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    \
                     {user}\ncurrent-context: c\n"
                ),
            )
            .unwrap();
            let error = from_kubeconfig(&file, None).unwrap_err().to_string();
            assert!(error.contains(words), "{error}");
        }
    }

    #[test]
    fn authorities() {
        assert_eq!(split_authority("a:1", 443), Some(("a".into(), 1)));
        assert_eq!(split_authority("a", 443), Some(("a".into(), 443)));
        assert_eq!(
            split_authority("[::1]:6443", 443),
            Some(("::1".into(), 6443))
        );
        assert_eq!(split_authority("a:x", 443), None);
    }
}
