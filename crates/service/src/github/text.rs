//! What the GitHub interface reads and writes as text: the `X-Hub-Signature-256` check
//! (HMAC-SHA256 over the raw body, compared in constant time), text escaped for GitHub
//! Markdown (no mention, link, image or HTML the agent did not cite), links Warden built, a
//! request read from a mention of the app, and the `/warden approve|reject sha256:…` command.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use warden_protocol::TaskKind;

use crate::chat::text::inert;

/// An issue comment holds at most 65,536 characters; each message carries fewer.
pub const MAX_COMMENT_UNITS: usize = 60_000;

/// Why a delivery's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `X-Hub-Signature-256` is missing or not `sha256=<hex>`.
    #[error("the delivery is not signed (X-Hub-Signature-256: sha256=<hex>)")]
    Missing,
    /// The signature is not the secret's.
    #[error("the delivery's signature does not match")]
    Mismatch,
}

fn mac(secret: &[u8], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(body);
    mac
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, as GitHub signs a delivery.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(mac(secret, body).finalize().into_bytes())
    )
}

/// Checks `X-Hub-Signature-256` against `secret` over the raw `body`, in constant time.
pub fn verify(secret: &[u8], header: Option<&str>, body: &[u8]) -> Result<(), SignatureError> {
    let given = header
        .map(str::trim)
        .and_then(|h| h.strip_prefix("sha256="))
        .and_then(|h| hex::decode(h).ok())
        .ok_or(SignatureError::Missing)?;
    mac(secret, body)
        .verify_slice(&given)
        .map_err(|_| SignatureError::Mismatch)
}

/// Text from a model, a repository or a user for a GitHub comment: inert (no `@mention` and no
/// bare link GitHub would detect), `&`, `<`, `>` as entities (no HTML), and Markdown's
/// punctuation backslash-escaped (no link, image, code span, emphasis, table or heading).
pub fn markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in inert(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '!' | '#' | '|' | '~' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            other => out.push(other),
        }
    }
    out
}

/// A link Warden built (a citation, the pull request it opened), as a Markdown autolink:
/// `<url>` with the characters an autolink cannot hold percent-encoded.
pub fn link(url: &str) -> String {
    let mut out = String::from("<");
    for c in url.chars() {
        match c {
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            ' ' => out.push_str("%20"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('>');
    out
}

/// What a mention of the app asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub kind: TaskKind,
    /// The text after the mention.
    pub text: String,
}

/// The request in `text` addressed to `@handle` (case-insensitive; not inside a word, an
/// e-mail address or a longer login; quoted lines, `> …`, are someone else's words and do
/// not count): `fix …` or `change …` asks for a change, anything else is a question.
pub fn parse_mention(text: &str, handle: &str) -> Option<Request> {
    let needle = format!("@{}", handle.to_ascii_lowercase());
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if line.trim_start().starts_with('>') {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        let mut from = 0;
        while let Some(found) = lower[from..].find(&needle) {
            let at = from + found;
            let end = at + needle.len();
            from = end;
            let before = lower[..at].chars().next_back();
            let after = lower[end..].chars().next();
            let login_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
            if before.is_some_and(|c| login_char(c) || c == '@' || c == '/' || c == '`')
                || after.is_some_and(|c| login_char(c) || c == '/' || c == '`')
            {
                continue;
            }
            let rest = text[start + end..]
                .trim_start_matches([',', ':'])
                .trim()
                .to_string();
            let first = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_end_matches([',', ':'])
                .to_ascii_lowercase();
            let kind = match first.as_str() {
                "fix" | "change" => TaskKind::Change,
                _ => TaskKind::Question,
            };
            return Some(Request { kind, text: rest });
        }
    }
    None
}

/// A decision asked for by comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub approve: bool,
    /// The hash as written (checked by the service: it must be the approval's).
    pub hash: String,
}

/// `/warden approve sha256:…` or `/warden reject sha256:…` (`/HANDLE` too) at the start of a
/// line that is not a quote; the first such line counts.
pub fn parse_command(text: &str, handle: &str) -> Option<Command> {
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix('/') else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let name = words.next().unwrap_or_default().to_ascii_lowercase();
        if name != "warden" && name != handle.to_ascii_lowercase() {
            continue;
        }
        let approve = match words.next().map(str::to_ascii_lowercase).as_deref() {
            Some("approve") => true,
            Some("reject") => false,
            _ => continue,
        };
        let hash: String = words.next().unwrap_or_default().chars().take(100).collect();
        return Some(Command { approve, hash });
    }
    None
}

/// Prefixes of GitHub's tokens (personal, OAuth, user-to-server, installation, refresh,
/// fine-grained).
const TOKEN_PREFIXES: [&str; 6] = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"];

/// A failed check's reported output as a task's context: `title`, `summary` and `text`
/// (each as the check wrote it, empty ones left out), at most `max` characters in all, every
/// word that looks like a GitHub token replaced with `[redacted]` (a check can print one; the
/// caller also removes Warden's registered secrets).
pub fn check_excerpt(output: &serde_json::Value, max: usize) -> String {
    let parts: Vec<&str> = ["title", "summary", "text"]
        .iter()
        .filter_map(|key| output[*key].as_str())
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect();
    let joined = parts.join("\n\n");
    let mut excerpt: String = joined.chars().take(max).collect();
    if joined.chars().count() > max {
        excerpt.push_str("\n… (cut)");
    }
    let mut out = String::with_capacity(excerpt.len());
    let mut rest = excerpt.as_str();
    while !rest.is_empty() {
        let word_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if word_end == 0 {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let word = &rest[..word_end];
        if TOKEN_PREFIXES.iter().any(|p| word.starts_with(p)) && word.len() >= 20 {
            out.push_str("[redacted]");
        } else {
            out.push_str(word);
        }
        rest = &rest[word_end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_output_is_bounded_and_tokens_in_it_are_redacted() {
        let output = serde_json::json!({
            "title": "1 test failed",
            "summary": "  ",
            "text": "token=ghs_16C7e42F292c6912E7710c838347Ae178B4a in the log; ghp_short stays",
        });
        assert_eq!(
            check_excerpt(&output, 1000),
            "1 test failed\n\ntoken=[redacted] in the log; ghp_short stays"
        );
        let long = serde_json::json!({"text": "é".repeat(50)});
        assert_eq!(
            check_excerpt(&long, 10),
            format!("{}\n… (cut)", "é".repeat(10))
        );
        assert_eq!(check_excerpt(&serde_json::Value::Null, 10), "");
    }

    #[test]
    fn githubs_published_test_vector_verifies() {
        let secret = b"It's a Secret to Everybody";
        let body = b"Hello, World!";
        let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(signature(secret, body), expected);
        assert_eq!(verify(secret, Some(expected), body), Ok(()));
        assert_eq!(
            verify(b"another secret", Some(expected), body),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(secret, Some(expected), b"Hello, World?"),
            Err(SignatureError::Mismatch)
        );
        for header in [None, Some(""), Some("sha1=757107ea"), Some("sha256=zz")] {
            assert_eq!(
                verify(secret, header, body),
                Err(SignatureError::Missing),
                "{header:?}"
            );
        }
        // A truncated signature is not a prefix match.
        assert_eq!(
            verify(secret, Some(&expected[..expected.len() - 2]), body),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn markdown_from_a_model_forms_no_mention_link_image_or_html() {
        let text = "cc @admin ![x](https://evil.example/p.png) [click](http://evil.com) <img src=x> <!-- c --> `code` **b** # h | t";
        let shown = markdown(text);
        for forbidden in [
            "@admin", "![", "](", "https://", "evil.com", "<img", "<!--", "`code`", "**",
        ] {
            assert!(!shown.contains(forbidden), "{forbidden} in {shown:?}");
        }
        // What a reader sees is the text itself.
        let read = shown
            .replace('\u{2060}', "")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        let unescaped: String = {
            let mut out = String::new();
            let mut chars = read.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    out.extend(chars.next());
                } else {
                    out.push(c);
                }
            }
            out
        };
        assert_eq!(unescaped, text);
        assert_eq!(
            link("https://github.example/acme/w/blob/abc/src/a b.rs#L1-L2"),
            "<https://github.example/acme/w/blob/abc/src/a%20b.rs#L1-L2>"
        );
    }

    #[test]
    fn mentions_are_read_and_classified() {
        let check = |text: &str, expected: Option<(TaskKind, &str)>| {
            assert_eq!(
                parse_mention(text, "warden"),
                expected.map(|(kind, text)| Request {
                    kind,
                    text: text.to_string()
                }),
                "{text}"
            );
        };
        check(
            "@warden fix the typo in README",
            Some((TaskKind::Change, "fix the typo in README")),
        );
        check(
            "Hey @Warden, change: the timeout",
            Some((TaskKind::Change, "change: the timeout")),
        );
        check(
            "@warden why does retry double?",
            Some((TaskKind::Question, "why does retry double?")),
        );
        check("@warden", Some((TaskKind::Question, "")));
        check(
            "first line\n@warden what calls main?",
            Some((TaskKind::Question, "what calls main?")),
        );
        // Not a mention of the app.
        check("mail me at bob@warden.dev", None);
        check("@wardens fix it", None);
        check("@acme/warden fix it", None);
        check("> @warden fix it\nquoted only", None);
        check("`@warden` is our bot", None);
        check("nothing here", None);
    }

    #[test]
    fn approval_commands_are_read() {
        let hash = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            parse_command(&format!("LGTM\n/warden approve {hash}\n"), "warden"),
            Some(Command {
                approve: true,
                hash: hash.clone()
            })
        );
        assert_eq!(
            parse_command(&format!("/bot REJECT {hash}"), "bot"),
            Some(Command {
                approve: false,
                hash: hash.clone()
            })
        );
        assert_eq!(
            parse_command("/warden approve", "warden"),
            Some(Command {
                approve: true,
                hash: String::new()
            })
        );
        assert_eq!(
            parse_command(&format!("> /warden approve {hash}"), "warden"),
            None
        );
        assert_eq!(
            parse_command(&format!("please /warden approve {hash}"), "warden"),
            None
        );
        assert_eq!(parse_command("/warden merge", "warden"), None);
        assert_eq!(parse_command("/other approve x", "warden"), None);
    }
}
