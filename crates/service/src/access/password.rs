//! Web console passwords: Argon2id (RustCrypto's `argon2`, its default parameters: 19 MiB,
//! two passes, one lane) with a 16-byte random salt, kept as a PHC string. Verification reads
//! the parameters from the stored string, so raising them later keeps old hashes working.
//! [`dummy_hash`] is what a sign-in with an unknown name is verified against, so it costs the
//! same time as one with a known name.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// Passwords shorter than this (in characters) are refused.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Passwords longer than this (in characters) are refused: hashing them costs more.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// Why a password is not acceptable, in words that say what to do.
pub(crate) fn password_problem(password: &str) -> Option<String> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        Some(format!(
            "the password has {chars} characters; it must have at least {MIN_PASSWORD_CHARS} \
             (a few unrelated words are easy to remember)"
        ))
    } else if chars > MAX_PASSWORD_CHARS {
        Some(format!(
            "the password has {chars} characters; it may have at most {MAX_PASSWORD_CHARS}"
        ))
    } else {
        None
    }
}

/// The PHC string of `password` with a fresh random salt.
pub(crate) fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| format!("no randomness available: {e}"))?;
    hash_with_salt(password, &salt)
}

fn hash_with_salt(password: &str, salt: &[u8]) -> Result<String, String> {
    let salt = SaltString::encode_b64(salt).map_err(|e| format!("cannot encode a salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether `password` matches the PHC string `hash` (false for a string that does not parse).
pub(crate) fn verify_password(hash: &str, password: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(error) => {
            tracing::warn!(%error, "a stored web password hash does not parse");
            false
        }
    }
}

/// A hash with the same parameters as [`hash_password`]'s, of a password nobody types (it is
/// shorter than [`MIN_PASSWORD_CHARS`]), computed once.
pub(crate) fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_with_salt("-", &[0x5a; 16]).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_against_their_own_hash() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(!hash.contains("correct horse"));
        assert!(verify_password(&hash, "correct horse battery"));
        assert!(!verify_password(&hash, "correct horse batterY"));
        assert!(!verify_password(&hash, ""));
        // Salted: the same password hashes differently each time.
        let again = hash_password("correct horse battery").unwrap();
        assert_ne!(hash, again);
        assert!(verify_password(&again, "correct horse battery"));
        // A stored string that is not a PHC string verifies nothing.
        assert!(!verify_password("not a hash", "correct horse battery"));
    }

    #[test]
    fn the_dummy_hash_costs_what_a_real_one_does_and_matches_no_password() {
        let dummy = PasswordHash::new(dummy_hash()).unwrap();
        let real_text = hash_password("correct horse battery").unwrap();
        let real = PasswordHash::new(&real_text).unwrap();
        assert_eq!(dummy.algorithm, real.algorithm);
        assert_eq!(dummy.version, real.version);
        assert_eq!(dummy.params, real.params);
        for guess in ["", "-", "password", "correct horse battery"] {
            // "-" is its password, but too short to ever be set.
            if guess != "-" {
                assert!(!verify_password(dummy_hash(), guess), "{guess}");
            }
        }
        assert!(password_problem("-").is_some());
    }

    #[test]
    fn password_lengths_are_checked_in_characters() {
        let check = |password: &str, ok: bool| {
            assert_eq!(password_problem(password).is_none(), ok, "{password:?}");
        };
        check("", false);
        check("elevenchars", false);
        check("twelve chars", true);
        check(&"é".repeat(12), true);
        check(&"x".repeat(MAX_PASSWORD_CHARS), true);
        check(&"x".repeat(MAX_PASSWORD_CHARS + 1), false);
    }
}
