//! Bearer tokens and roles.

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};

use super::{ApiError, ApiState, ErrorCode};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiRole {
    /// Everything, including everyone's tasks and registering repositories.
    Admin,
    /// Submits tasks and sees its own.
    Operator,
    /// Reads its own tasks and the repositories.
    Viewer,
}

impl ApiRole {
    fn parse(name: &str) -> Option<ApiRole> {
        match name {
            "admin" => Some(ApiRole::Admin),
            "operator" => Some(ApiRole::Operator),
            "viewer" => Some(ApiRole::Viewer),
            _ => None,
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: ApiRole,
}

struct Token {
    caller: Caller,
    digest: [u8; 32],
}

/// The configured API tokens, kept only as SHA-256 digests.
pub struct Tokens(Vec<Token>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|t| &t.caller))
            .finish()
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl Tokens {
    /// Parses `name:role:token[,name:role:token…]`. Tokens shorter than 16 characters are
    /// refused: they can be guessed.
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
            let role = ApiRole::parse(role).ok_or_else(|| {
                format!(
                    "WARDEN_API_TOKENS entry {}: unknown role {role:?} (admin, operator or viewer)",
                    index + 1
                )
            })?;
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
            {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {}: the name must be letters, digits, - _ . @",
                    index + 1
                ));
            }
            if token.len() < 16 {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {} ({name}): the token must be at least 16 characters",
                    index + 1
                ));
            }
            tokens.push(Token {
                caller: Caller {
                    name: name.to_string(),
                    role,
                },
                digest: digest(token),
            });
        }
        Ok(Tokens(tokens))
    }

    /// The caller whose token this is. Every configured token is compared in full, whatever
    /// matches, so the time taken says nothing about which bytes matched.
    pub fn authenticate(&self, presented: &str) -> Option<Caller> {
        let presented = digest(presented);
        let mut found: Option<&Token> = None;
        for token in &self.0 {
            let mut difference = 0u8;
            for (a, b) in token.digest.iter().zip(presented.iter()) {
                difference |= a ^ b;
            }
            if difference == 0 && found.is_none() {
                found = Some(token);
            }
        }
        found.map(|t| t.caller.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub(super) async fn authenticate(
    state: &ApiState,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "missing bearer token"))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::new(ErrorCode::Unauthorized, "malformed Authorization header"))?;
    let token = match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the Authorization header must be `Bearer <token>`",
            ))
        }
    };
    state
        .tokens
        .authenticate(token)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "invalid token"))
}

pub(super) fn require_writer(caller: &Caller) -> Result<(), ApiError> {
    match caller.role {
        ApiRole::Admin | ApiRole::Operator => Ok(()),
        ApiRole::Viewer => Err(ApiError::new(
            ErrorCode::Forbidden,
            "viewer tokens can only read",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_authenticate() {
        let tokens =
            Tokens::parse("alice:operator:aaaaaaaaaaaaaaaa1, bob:admin:bbbbbbbbbbbbbbbb:colon")
                .unwrap();
        assert_eq!(
            tokens.authenticate("bbbbbbbbbbbbbbbb:colon"),
            Some(Caller {
                name: "bob".into(),
                role: ApiRole::Admin
            })
        );
        assert_eq!(
            tokens.authenticate("aaaaaaaaaaaaaaaa1").unwrap().name,
            "alice"
        );
        assert_eq!(tokens.authenticate("aaaaaaaaaaaaaaaa"), None);
        assert_eq!(tokens.authenticate(""), None);
        for bad in [
            "alice:root:aaaaaaaaaaaaaaaa",
            "alice:admin:short",
            "alice",
            ":admin:aaaaaaaaaaaaaaaa",
        ] {
            assert!(Tokens::parse(bad).is_err(), "{bad}");
        }
    }
}
