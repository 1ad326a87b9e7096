//! API tokens as the store keeps them: only a SHA-256 digest of each, minted here for
//! `warden token create` and `POST /v1/tokens` alike.

use sha2::{Digest, Sha256};
use warden_store::NewApiToken;

use crate::tasks::Role;

/// The SHA-256 digest of a token.
pub fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Token names (a task's owner): 1-64 letters, digits, `-`, `_`, `.`, `@`.
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

/// A new random token for `name` with `role`: the row to store (its digest only) and the
/// secret, `wdn_` + 64 hex digits (32 random bytes), to show once.
pub fn mint_token(
    name: Option<&str>,
    role: Role,
    created_by: &str,
) -> Result<(NewApiToken, String), String> {
    let mut id = [0u8; 8];
    let mut secret = [0u8; 32];
    getrandom::fill(&mut id).map_err(|e| format!("no randomness available: {e}"))?;
    getrandom::fill(&mut secret).map_err(|e| format!("no randomness available: {e}"))?;
    let id = format!("tok_{}", hex::encode(id));
    let name = name.map_or_else(|| id.clone(), str::to_string);
    if !valid_token_name(&name) {
        return Err(format!(
            "invalid token name {name:?}: 1-64 letters, digits, '-', '_', '.' or '@'"
        ));
    }
    let secret = format!("wdn_{}", hex::encode(secret));
    let token = NewApiToken {
        id,
        name,
        role: role.as_str().to_string(),
        digest: token_digest(&secret),
        created_by: created_by.to_string(),
    };
    Ok((token, secret))
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
}
