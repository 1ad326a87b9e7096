//! API tokens: the bootstrap tokens of `WARDEN_API_TOKENS` (kept in memory as digests,
//! compared in constant time) and the stored ones (only a SHA-256 digest of each, minted here
//! for `warden token create` and `POST /v1/tokens` alike).

use sha2::{Digest, Sha256};
use warden_store::NewApiToken;

use crate::tasks::{Principal, Role};

/// Bootstrap tokens (`WARDEN_API_TOKENS`) shorter than this are refused.
pub const MIN_BOOTSTRAP_TOKEN_LEN: usize = 32;

/// The SHA-256 digest of a token (or of any secret).
pub fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Names of tokens and web users (a task's owner): 1-64 letters, digits, `-`, `_`, `.`, `@`.
pub fn valid_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
}

/// Lowercase hex SHA-256 of a token: what the store keeps and looks up.
pub fn token_digest(token: &str) -> String {
    hex::encode(digest(token))
}

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The name breaks [`valid_token_name`].
    #[error("invalid token name {0:?}: 1-64 letters, digits, '-', '_', '.' or '@'")]
    InvalidName(String),
    /// The operating system gave no randomness.
    #[error("no randomness available: {0}")]
    NoRandomness(String),
}

/// `prefix` + 64 hex digits of fresh randomness (32 bytes).
pub(crate) fn random_secret(prefix: &str) -> Result<String, MintError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| MintError::NoRandomness(e.to_string()))?;
    Ok(format!("{prefix}{}", hex::encode(secret)))
}

/// `prefix` + 16 hex digits (8 random bytes): an id.
pub(crate) fn random_id(prefix: &str) -> Result<String, MintError> {
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).map_err(|e| MintError::NoRandomness(e.to_string()))?;
    Ok(format!("{prefix}{}", hex::encode(id)))
}

/// A new random token for `name` with `role`: the row to store (its digest only) and the
/// secret, `wdn_` + 64 hex digits (32 random bytes), to show once.
pub fn mint_token(
    name: Option<&str>,
    role: Role,
    created_by: &str,
) -> Result<(NewApiToken, String), MintError> {
    let id = random_id("tok_")?;
    let name = name.map_or_else(|| id.clone(), str::to_string);
    if !valid_token_name(&name) {
        return Err(MintError::InvalidName(name));
    }
    let secret = random_secret("wdn_")?;
    let token = NewApiToken {
        id,
        name,
        role: role.as_str().to_string(),
        digest: token_digest(&secret),
        created_by: created_by.to_string(),
    };
    Ok((token, secret))
}

struct BootstrapToken {
    principal: Principal,
    digest: [u8; 32],
}

/// The bootstrap API tokens (`WARDEN_API_TOKENS`), kept only as SHA-256 digests.
#[derive(Default)]
pub struct Tokens(Vec<BootstrapToken>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|t| &t.principal))
            .finish()
    }
}

impl Tokens {
    /// Parses `name:role:token[,name:role:token…]`. Tokens shorter than
    /// [`MIN_BOOTSTRAP_TOKEN_LEN`] characters are refused: they can be guessed.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut tokens = Vec::new();
        for (index, item) in text.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let mut parts = item.splitn(3, ':');
            let (Some(name), Some(role), Some(token)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {} is not name:role:token",
                    index + 1
                ));
            };
            let role = Role::parse(role).ok_or_else(|| {
                format!(
                    "WARDEN_API_TOKENS entry {}: unknown role {role:?} (admin, operator or viewer)",
                    index + 1
                )
            })?;
            if !valid_token_name(name) {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {}: the name must be letters, digits, - _ . @",
                    index + 1
                ));
            }
            if token.chars().count() < MIN_BOOTSTRAP_TOKEN_LEN {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {} ({name}): the token has {} characters; it must \
                     have at least {MIN_BOOTSTRAP_TOKEN_LEN} (e.g. `openssl rand -hex 24`)",
                    index + 1,
                    token.chars().count()
                ));
            }
            tokens.push(BootstrapToken {
                principal: Principal {
                    name: name.to_string(),
                    role,
                },
                digest: digest(token),
            });
        }
        Ok(Tokens(tokens))
    }

    /// Who holds this bootstrap token. Every configured token is compared in full, whatever
    /// matches, so the time taken says nothing about which bytes matched.
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        self.authenticate_digest(&digest(presented))
    }

    /// [`Tokens::authenticate`] for a token already hashed.
    pub fn authenticate_digest(&self, presented: &[u8; 32]) -> Option<Principal> {
        let mut found: Option<&BootstrapToken> = None;
        for token in &self.0 {
            let mut difference = 0u8;
            for (a, b) in token.digest.iter().zip(presented.iter()) {
                difference |= a ^ b;
            }
            if difference == 0 && found.is_none() {
                found = Some(token);
            }
        }
        found.map(|t| t.principal.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_are_random_and_stored_as_digests() {
        let (row, secret) = mint_token(Some("ci-bot"), Role::Operator, "root").unwrap();
        assert!(secret.starts_with("wdn_") && secret.len() == 4 + 64);
        assert_eq!(row.digest, token_digest(&secret));
        assert_eq!(row.digest.len(), 64);
        assert!(!row.digest.contains(&secret[4..]));
        assert_eq!(
            (row.name.as_str(), row.role.as_str()),
            ("ci-bot", "operator")
        );
        let (other, other_secret) = mint_token(None, Role::Viewer, "root").unwrap();
        assert_ne!(other_secret, secret);
        assert_ne!(other.id, row.id);
        assert_eq!(other.name, other.id);
        assert!(mint_token(Some("bad name"), Role::Viewer, "root").is_err());
        assert!(mint_token(Some(""), Role::Viewer, "root").is_err());
    }

    #[test]
    fn tokens_parse_and_authenticate() {
        let a = "a".repeat(31) + "1";
        let b = "b".repeat(32) + ":colon";
        let tokens = Tokens::parse(&format!("alice:operator:{a}, bob:admin:{b}")).unwrap();
        assert_eq!(
            tokens.authenticate(&b),
            Some(Principal {
                name: "bob".into(),
                role: Role::Admin
            })
        );
        assert_eq!(tokens.authenticate(&a).unwrap().name, "alice");
        assert_eq!(tokens.authenticate(&"a".repeat(32)), None);
        assert_eq!(tokens.authenticate(""), None);
        for bad in [
            format!("alice:root:{a}"),
            "alice:admin:short".to_string(),
            // 31 characters: long enough before, refused now.
            format!("alice:admin:{}", "x".repeat(31)),
            "alice".to_string(),
            format!(":admin:{a}"),
        ] {
            assert!(Tokens::parse(&bad).is_err(), "{bad}");
        }
        let error = Tokens::parse("ci:admin:admin-token-0123456789")
            .err()
            .unwrap();
        assert!(error.contains("at least 32"), "{error}");
        assert!(Tokens::default().is_empty());
    }
}
