//! `[callbacks]` in `warden.toml`, resolved, and the check of a submitted callback URL
//! ([`CallbackConfig::check_url`]): the URL must parse (WHATWG rules, so `127.1` and
//! `0x7f000001` are read as `127.0.0.1`), be `https` (or `http` when `[callbacks] allow_http`),
//! carry no credentials or fragment, have an origin in `[callbacks] allowed_origins`, and not be
//! a non-public IP literal. Without a secret no callback is accepted. Delivery (the outbox, the
//! signatures) is [`crate::callback`]'s; where connections may go is [`warden_engine::address`]'s.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use warden_config::CallbackSection;

pub use warden_engine::address::{
    AddressPolicy, CheckedResolver, Lookup, LookupFuture, SystemLookup,
};

/// A secret shorter than this is refused at start-up.
pub const MIN_SECRET_BYTES: usize = 32;

const DEFAULT_MAX_ATTEMPTS: u32 = 8;
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Requests must end well within the intent lease, or a second sender could claim it.
const MAX_TIMEOUT_SECS: u64 = 30;
const MAX_URL_BYTES: usize = 2048;

/// The signing key; never printed.
#[derive(Clone)]
pub struct CallbackSecret(Arc<[u8]>);

impl std::fmt::Debug for CallbackSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallbackSecret(***)")
    }
}

impl CallbackSecret {
    pub fn new(secret: &[u8]) -> anyhow::Result<CallbackSecret> {
        if secret.len() < MIN_SECRET_BYTES {
            bail!(
                "the callback secret must be at least {MIN_SECRET_BYTES} bytes, got {}",
                secret.len()
            );
        }
        Ok(CallbackSecret(secret.into()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Callbacks, resolved. The default accepts none.
#[derive(Debug, Clone)]
pub struct CallbackConfig {
    /// `None`: callbacks are refused at submission.
    pub secret: Option<CallbackSecret>,
    pub allowed_origins: Vec<reqwest::Url>,
    pub allow_http: bool,
    pub max_attempts: u32,
    pub timeout: Duration,
    /// Where connections may go. Never from configuration: [`AddressPolicy::public_only`]
    /// unless a test says otherwise in code.
    pub address_policy: AddressPolicy,
}

impl Default for CallbackConfig {
    fn default() -> CallbackConfig {
        CallbackConfig {
            secret: None,
            allowed_origins: Vec::new(),
            allow_http: false,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            address_policy: AddressPolicy::public_only(),
        }
    }
}

impl CallbackConfig {
    /// `[callbacks]` with `WARDEN_CALLBACK_SECRET` (`env_secret`) taking precedence.
    pub fn resolve(
        section: &CallbackSection,
        env_secret: Option<String>,
    ) -> anyhow::Result<CallbackConfig> {
        let secret = match env_secret.or_else(|| section.secret.clone()) {
            Some(text) => Some(
                CallbackSecret::new(text.as_bytes())
                    .map_err(|e| anyhow::anyhow!("callbacks.secret: {e}"))?,
            ),
            None => None,
        };
        let allow_http = section.allow_http.unwrap_or(false);
        let mut allowed_origins = Vec::new();
        for text in &section.allowed_origins {
            let origin = parse_origin(text, allow_http)
                .map_err(|e| anyhow::anyhow!("callbacks.allowed_origins: {text:?}: {e}"))?;
            allowed_origins.push(origin);
        }
        let max_attempts = section.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if max_attempts == 0 {
            bail!("callbacks.max_attempts must be at least 1");
        }
        let timeout_secs = section.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if !(1..=MAX_TIMEOUT_SECS).contains(&timeout_secs) {
            bail!("callbacks.timeout_secs must be 1-{MAX_TIMEOUT_SECS}, got {timeout_secs}");
        }
        Ok(CallbackConfig {
            secret,
            allowed_origins,
            allow_http,
            max_attempts,
            timeout: Duration::from_secs(timeout_secs),
            address_policy: AddressPolicy::public_only(),
        })
    }

    /// Whether callbacks can be accepted at all.
    pub fn enabled(&self) -> bool {
        self.secret.is_some() && !self.allowed_origins.is_empty()
    }

    /// The URL a submission may use, normalised; else a message for the submitter.
    pub fn check_url(&self, text: &str) -> Result<reqwest::Url, String> {
        if self.secret.is_none() {
            return Err(
                "callbacks are disabled on this server: it has no callback secret \
                 ([callbacks] secret or WARDEN_CALLBACK_SECRET)"
                    .into(),
            );
        }
        if text.len() > MAX_URL_BYTES {
            return Err(format!("callback.url is longer than {MAX_URL_BYTES} bytes"));
        }
        let url = reqwest::Url::parse(text)
            .map_err(|e| format!("callback.url is not a valid URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err("callback.url must use https".into()),
            other => return Err(format!("callback.url scheme {other:?} is not https")),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("callback.url must not carry credentials".into());
        }
        if url.fragment().is_some() {
            return Err("callback.url must not have a fragment".into());
        }
        if let Some(address) = literal_address(&url) {
            self.address_policy
                .check(address)
                .map_err(|e| format!("callback.url: {e}"))?;
        }
        if !self
            .allowed_origins
            .iter()
            .any(|allowed| allowed.origin() == url.origin())
        {
            return Err(format!(
                "callback.url origin {} is not allow-listed on this server ([callbacks] allowed_origins)",
                url.origin().ascii_serialization()
            ));
        }
        Ok(url)
    }
}

/// An allow-list entry: `scheme://host[:port]`, nothing else.
fn parse_origin(text: &str, allow_http: bool) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| e.to_string())?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => return Err("http origins need callbacks.allow_http = true".into()),
        other => return Err(format!("scheme {other:?} is not https")),
    }
    if url.host_str().is_none()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err("expected scheme://host[:port] and nothing more".into());
    }
    Ok(url)
}

/// The socket address of a URL whose host is an IP literal (after WHATWG normalisation).
fn literal_address(url: &reqwest::Url) -> Option<std::net::SocketAddr> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: std::net::IpAddr = host.parse().ok()?;
    Some(std::net::SocketAddr::new(ip, url.port_or_known_default()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn config(origins: &[&str], allow_http: bool) -> CallbackConfig {
        CallbackConfig::resolve(
            &CallbackSection {
                secret: Some(SECRET.into()),
                allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
                allow_http: Some(allow_http),
                ..CallbackSection::default()
            },
            None,
        )
        .unwrap()
    }

    #[test]
    fn configuration_is_validated() {
        let section = |secret: &str, origin: &str| CallbackSection {
            secret: Some(secret.into()),
            allowed_origins: vec![origin.into()],
            ..CallbackSection::default()
        };
        assert!(
            CallbackConfig::resolve(&section(SECRET, "https://hooks.example.com"), None)
                .unwrap()
                .enabled()
        );
        for (secret, origin) in [
            ("short", "https://hooks.example.com"),
            (SECRET, "http://hooks.example.com"),
            (SECRET, "https://hooks.example.com/path"),
            (SECRET, "https://user@hooks.example.com"),
            (SECRET, "ftp://hooks.example.com"),
            (SECRET, "not a url"),
        ] {
            assert!(
                CallbackConfig::resolve(&section(secret, origin), None).is_err(),
                "{secret} {origin}"
            );
        }
        // The environment wins over the file.
        let from_env = CallbackConfig::resolve(
            &section("short", "https://hooks.example.com"),
            Some(SECRET.into()),
        )
        .unwrap();
        assert_eq!(from_env.secret.unwrap().as_bytes(), SECRET.as_bytes());
        assert!(!CallbackConfig::default().enabled());
        assert!(format!("{:?}", config(&[], false)).contains("***"));
        assert!(!format!("{:?}", config(&[], false)).contains(SECRET));
    }

    #[test]
    fn submitted_urls_are_checked() {
        let config = config(
            &["https://hooks.example.com", "https://[2606:4700::1111]"],
            false,
        );
        let accepted = config
            .check_url("https://HOOKS.example.com:443/warden?x=1")
            .unwrap();
        assert_eq!(accepted.as_str(), "https://hooks.example.com/warden?x=1");
        assert!(config.check_url("https://[2606:4700::1111]/x").is_ok());
        for (url, expected) in [
            ("http://hooks.example.com/", "https"),
            ("https://hooks.example.com:8443/", "not allow-listed"),
            ("https://other.example.com/", "not allow-listed"),
            ("https://u:p@hooks.example.com/", "credentials"),
            ("https://hooks.example.com/#x", "fragment"),
            ("file:///etc/passwd", "scheme"),
            ("hooks.example.com", "not a valid URL"),
            ("https://127.1/", "127.0.0.1 is not a public address"),
            ("https://0x7f000001/", "127.0.0.1 is not a public address"),
            ("https://2130706433/", "127.0.0.1 is not a public address"),
            ("https://[::ffff:127.0.0.1]/", "not a public address"),
            ("https://169.254.169.254/", "not a public address"),
            ("https://100.64.0.1/", "not a public address"),
            ("https://[fd00::1]/", "not a public address"),
        ] {
            let error = config.check_url(url).unwrap_err();
            assert!(error.contains(expected), "{url}: {error}");
        }
        let error = CallbackConfig::default()
            .check_url("https://hooks.example.com/")
            .unwrap_err();
        assert!(error.contains("no callback secret"), "{error}");
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(config.check_url(&long).is_err());
    }
}
