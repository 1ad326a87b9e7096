//! Authentication as a GitHub App: a JWT signed RS256 with the App's private key (`iat` 60 s
//! in the past against clock drift, `exp` 9 minutes ahead — GitHub refuses more than 10 —
//! `iss` the App's client id), exchanged at `POST /app/installations/{id}/access_tokens` for
//! an installation token (an hour long) narrowed to the repositories of the call it is for
//! (`repositories`: names) and to the permissions Warden's calls need ([`TOKEN_PERMISSIONS`]),
//! cached per [`TokenScope`] until five minutes before it expires.
//! The key and the tokens live only in the Warden process: never in a sandbox, a URL or a
//! message. RSA is `ring`'s (already in the tree through rustls); PEM is read here.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

use super::{GithubError, GithubToken};

/// A token is renewed when fewer than this many seconds of it remain.
const RENEW_BEFORE_SECS: i64 = 300;
/// The JWT's `iat` is this far in the past (GitHub's advice against clock drift).
const IAT_SKEW_SECS: i64 = 60;
/// The JWT's `exp` is this far ahead (GitHub refuses more than ten minutes).
const EXP_AHEAD_SECS: i64 = 540;

/// An App's private key, with the text it was read from for redaction. `Debug` never shows
/// either.
pub struct AppKey {
    pair: RsaKeyPair,
    /// The PEM body's lines, and the body on one line: what a redactor hides.
    text: Vec<String>,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppKey(…)")
    }
}

impl AppKey {
    /// Reads a PEM private key as GitHub hands it out (`BEGIN RSA PRIVATE KEY`, PKCS#1) or as
    /// PKCS#8 (`BEGIN PRIVATE KEY`).
    pub fn from_pem(pem: &str) -> Result<AppKey, String> {
        let pem = pem.trim();
        let (label, body) = pem
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.split_once("-----"))
            .ok_or("not a PEM private key (no -----BEGIN line)")?;
        let end = format!("-----END {label}-----");
        let body = body
            .trim()
            .strip_suffix(end.as_str())
            .ok_or_else(|| format!("the PEM has no {end} line"))?;
        let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let mut text: Vec<String> = body
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect();
        text.push(base64.clone());
        let der = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|e| format!("the PEM body is not base64: {e}"))?;
        let key = match label {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
            other => return Err(format!("a {other} is not an RSA private key")),
        }
        .map_err(|e| format!("the RSA key is refused: {e}"))?;
        Ok(AppKey { pair: key, text })
    }

    /// The key's text as the PEM held it: each base64 line and the whole body on one line,
    /// for the redactor (a leak of any line of the key is hidden, not only of the whole key).
    pub fn secret_text(&self) -> &[String] {
        &self.text
    }

    /// The public key, PKCS#1 `RSAPublicKey` DER (what GitHub checks the JWT with).
    pub fn public_key_der(&self) -> Vec<u8> {
        ring::signature::KeyPair::public_key(&self.pair)
            .as_ref()
            .to_vec()
    }

    /// The App's JWT at `now_secs` (Unix seconds).
    pub fn jwt(&self, client_id: &str, now_secs: i64) -> Result<String, GithubError> {
        let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let header = encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iat": now_secs - IAT_SKEW_SECS,
            "exp": now_secs + EXP_AHEAD_SECS,
            "iss": client_id,
        });
        let signing_input = format!("{header}.{}", encode(claims.to_string().as_bytes()));
        let mut signature = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| GithubError::Config("the App key cannot sign".into()))?;
        Ok(format!("{signing_input}.{}", encode(&signature)))
    }
}

/// An App installation: who to ask for its tokens.
#[derive(Debug, Clone)]
pub struct AppCredentials {
    /// The App's client id (`Iv…`; the numeric App id works too), the JWT's `iss`.
    pub client_id: String,
    pub installation_id: u64,
    pub key: Arc<AppKey>,
}

/// The permissions an installation token is asked for: what Warden's calls need and no more
/// (pull requests opened and listed, issue comments written, collaborators' permissions read;
/// the push goes to the repository's remote as configured, not with this token).
pub const TOKEN_PERMISSIONS: [(&str, &str); 3] = [
    ("issues", "write"),
    ("metadata", "read"),
    ("pull_requests", "write"),
];

/// What an installation token covers: the installation and the repositories (names, without
/// the owner: an installation belongs to one account), sorted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenScope {
    pub installation_id: u64,
    pub repositories: Vec<String>,
}

impl TokenScope {
    pub fn new(installation_id: u64, repositories: impl IntoIterator<Item = String>) -> TokenScope {
        let mut repositories: Vec<String> = repositories.into_iter().collect();
        repositories.sort();
        repositories.dedup();
        TokenScope {
            installation_id,
            repositories,
        }
    }

    /// The body of `POST /app/installations/{id}/access_tokens` for this scope.
    pub fn request_body(&self) -> serde_json::Value {
        let permissions: serde_json::Map<String, serde_json::Value> = TOKEN_PERMISSIONS
            .iter()
            .map(|(name, level)| (name.to_string(), serde_json::json!(level)))
            .collect();
        serde_json::json!({
            "repositories": self.repositories,
            "permissions": permissions,
        })
    }
}

/// The installation tokens in use, per scope, and when each expires (seconds on the monotonic
/// clock, [`monotonic_secs`]).
#[derive(Debug, Default)]
pub struct TokenCache(
    tokio::sync::Mutex<std::collections::HashMap<TokenScope, (GithubToken, i64)>>,
    /// Every token fetched and not yet expired, readable without waiting (for redaction).
    std::sync::Mutex<Vec<(GithubToken, i64)>>,
);

impl TokenCache {
    /// The token cached for `scope` unless it expires within five minutes of `now_secs`; else a
    /// new one from `fetch` (called once at a time: concurrent callers wait for it), which says
    /// when it expires on the same clock. Expired tokens of other scopes are dropped. Times are
    /// monotonic seconds ([`monotonic_secs`]), never the wall clock, which can be stepped.
    pub async fn get<F, Fut>(
        &self,
        scope: &TokenScope,
        now_secs: i64,
        fetch: F,
    ) -> Result<GithubToken, GithubError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(GithubToken, i64), GithubError>>,
    {
        let mut cached = self.0.lock().await;
        cached.retain(|_, (_, expires_at)| *expires_at > now_secs);
        if let Some((token, expires_at)) = cached.get(scope) {
            if *expires_at - now_secs > RENEW_BEFORE_SECS {
                return Ok(token.clone());
            }
        }
        let (token, expires_at) = fetch().await?;
        cached.insert(scope.clone(), (token.clone(), expires_at));
        let mut known = self
            .1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.retain(|(_, expires_at)| *expires_at > now_secs);
        known.push((token.clone(), expires_at));
        Ok(token)
    }

    /// The tokens fetched and not known to have expired (to keep them out of error messages).
    pub fn current(&self) -> Vec<GithubToken> {
        self.1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(token, _)| token.clone())
            .collect()
    }
}

/// Unix seconds now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Seconds on the monotonic clock (an arbitrary origin fixed for the process, never stepped
/// with the wall clock): what [`TokenCache`] measures a token's life on.
pub fn monotonic_secs() -> i64 {
    let ms = warden_runtime::Clock::monotonic_ms(&warden_runtime::SystemClock);
    i64::try_from(ms / 1000).unwrap_or(i64::MAX)
}

/// How long a fetched token is trusted at most, whatever `expires_at` says.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_are_named() {
        assert!(AppKey::from_pem("nothing")
            .unwrap_err()
            .contains("not a PEM"));
        assert!(AppKey::from_pem("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n")
            .unwrap_err()
            .contains("END"));
        assert!(AppKey::from_pem(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"
        )
        .unwrap_err()
        .contains("refused"));
        assert!(AppKey::from_pem(
            "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----"
        )
        .unwrap_err()
        .contains("not an RSA"));
    }

    #[tokio::test]
    async fn tokens_are_cached_per_scope_until_five_minutes_before_they_expire() {
        let cache = TokenCache::default();
        let token = |name: &str| GithubToken::new(name).unwrap();
        let widgets = TokenScope::new(42, ["widgets".to_string()]);
        let first = cache
            .get(&widgets, 1_000, || async {
                Ok((token("ghs_one"), 1_000 + 3_600))
            })
            .await
            .unwrap();
        assert_eq!(first.expose(), "ghs_one");
        let cached = cache
            .get(&widgets, 1_000 + 3_000, || async {
                Ok((token("ghs_two"), 0))
            })
            .await
            .unwrap();
        assert_eq!(cached.expose(), "ghs_one");
        // Another repository (or installation) is another token.
        let gadgets = TokenScope::new(42, ["gadgets".to_string()]);
        let other = cache
            .get(&gadgets, 1_000 + 3_000, || async {
                Ok((token("ghs_gadgets"), 1_000 + 6_000))
            })
            .await
            .unwrap();
        assert_eq!(other.expose(), "ghs_gadgets");
        assert_ne!(widgets, TokenScope::new(7, ["widgets".to_string()]));
        let renewed = cache
            .get(&widgets, 1_000 + 3_301, || async {
                Ok((token("ghs_two"), 9_999))
            })
            .await
            .unwrap();
        assert_eq!(renewed.expose(), "ghs_two");
        let current: Vec<String> = cache
            .current()
            .iter()
            .map(|t| t.expose().to_string())
            .collect();
        assert_eq!(current, ["ghs_one", "ghs_gadgets", "ghs_two"]);
        // Minimal permissions, the repositories by name.
        assert_eq!(
            TokenScope::new(42, ["b".to_string(), "a".to_string(), "b".to_string()]).request_body(),
            serde_json::json!({
                "repositories": ["a", "b"],
                "permissions": {"issues": "write", "metadata": "read", "pull_requests": "write"},
            })
        );
    }
}
