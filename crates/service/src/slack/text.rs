//! What the Slack app reads and writes as text: the v0 request signature (HMAC-SHA256 over
//! `v0:{timestamp}:{body}`, a five-minute window), text escaped for Slack's mrkdwn (`&`, `<`,
//! `>` as entities, so no `<!channel>`, `<@U…>` or `<url|…>` can be formed, and the chats'
//! [`inert`] so no bare link or `@here` is detected), links Warden built, a request read from a
//! mention, and the value of an Approve/Reject button.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use warden_protocol::TaskKind;

use crate::chat::text::inert;

/// How far a request's timestamp may be from now, in seconds (Slack's advice: five minutes).
pub const MAX_AGE_SECS: i64 = 300;
/// Slack's limit on a button's `value`, in characters.
pub const MAX_BUTTON_VALUE_CHARS: usize = 2000;
/// A section block's text is at most 3,000 characters: each message carries at most this
/// many UTF-16 units (never more characters).
pub const MAX_MESSAGE_UNITS: usize = 3000;

/// Why a request's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `X-Slack-Request-Timestamp` or `X-Slack-Signature` is missing or unreadable.
    #[error("the request is not signed (X-Slack-Request-Timestamp and X-Slack-Signature)")]
    Missing,
    /// The timestamp is more than five minutes from now: a replay, or a wrong clock.
    #[error("the request's timestamp is more than five minutes from now")]
    Stale,
    /// The signature is not the secret's.
    #[error("the request's signature does not match")]
    Mismatch,
}

/// `v0=<hex HMAC-SHA256(secret, "v0:{timestamp}:{body}")>`.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
    )
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // An HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// Checks a request's signature headers against `secret` at `now_secs` (Unix seconds): the
/// timestamp within [`MAX_AGE_SECS`], the signature compared in constant time.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_secs: i64,
) -> Result<(), SignatureError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(SignatureError::Missing);
    };
    let sent: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::Missing)?;
    if now_secs.abs_diff(sent) > MAX_AGE_SECS.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let given = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or(SignatureError::Mismatch)?;
    mac(secret, timestamp.trim(), body)
        .verify_slice(&given)
        .map_err(|_| SignatureError::Mismatch)
}

/// Text from a model, a repository or a user for a mrkdwn message: inert (no bare link or
/// mention Slack would detect) and `&`, `<`, `>` as entities (no `<…>` control sequence).
pub fn mrkdwn(text: &str) -> String {
    escape(&inert(text))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A link Warden built, as mrkdwn: `<url>` (the URL's own `&`, `<`, `>` escaped and `|`,
/// which would start a label, percent-encoded).
pub fn link(url: &str) -> String {
    format!("<{}>", escape(url).replace('|', "%7C"))
}

/// What a mention or a direct message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub kind: TaskKind,
    /// The rest of the text: maybe a repository name first, then the prompt.
    pub text: String,
}

/// A message's text as its author wrote it to the app (Slack's entities read): the bot's
/// mentions and any leading mention removed.
pub fn addressed_text(text: &str, bot_user: Option<&str>) -> String {
    let mut text = text.to_string();
    if let Some(bot) = bot_user {
        text = text.replace(&format!("<@{bot}>"), " ");
    }
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let mut text = text.trim();
    // A leading mention is the one addressing the app, whichever id it has.
    while let Some(rest) = text.strip_prefix("<@").and_then(|t| t.split_once('>')) {
        text = rest.1.trim_start();
    }
    text.to_string()
}

/// Reads a message's text (as Slack sends it: `&`, `<`, `>` as entities, mentions as `<@U…>`):
/// the bot's mentions removed; `run …` or `change …` asks for a change, `ask …` or anything
/// else is a question.
pub fn parse_request(text: &str, bot_user: Option<&str>) -> Request {
    let text = addressed_text(text, bot_user);
    let text = text.as_str();
    let (head, rest) = match text.find(char::is_whitespace) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    match head.to_ascii_lowercase().as_str() {
        "run" | "change" => Request {
            kind: TaskKind::Change,
            text: rest.to_string(),
        },
        "ask" => Request {
            kind: TaskKind::Question,
            text: rest.to_string(),
        },
        _ => Request {
            kind: TaskKind::Question,
            text: text.to_string(),
        },
    }
}

/// The repository `text` starts with, if its first word (before any `@REV`) is one of `known`,
/// and the rest.
pub fn leading_repo<'a>(text: &'a str, known: &[String]) -> (Option<String>, &'a str) {
    let (first, rest) = match text.find(char::is_whitespace) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    let name = first.split('@').next().unwrap_or_default();
    if !rest.is_empty() && known.iter().any(|k| k == name) {
        (Some(first.to_string()), rest)
    } else {
        (None, text)
    }
}

/// What a button does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ButtonAction {
    Approve,
    Reject,
}

impl ButtonAction {
    /// The button's `action_id`.
    pub fn action_id(self) -> &'static str {
        match self {
            ButtonAction::Approve => "warden_approve",
            ButtonAction::Reject => "warden_reject",
        }
    }

    pub fn from_action_id(id: &str) -> Option<ButtonAction> {
        match id {
            "warden_approve" => Some(ButtonAction::Approve),
            "warden_reject" => Some(ButtonAction::Reject),
            _ => None,
        }
    }
}

/// A button's `value`: the approval's short id (the hash it is bound to is in the message
/// text); `None` when it is not an approval id or would pass Slack's limit.
pub fn button_value(approval: &str) -> Option<String> {
    let well_formed = !approval.is_empty()
        && approval.len() <= MAX_BUTTON_VALUE_CHARS
        && approval
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    well_formed.then(|| approval.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slack's documented example ("Verifying requests from Slack"), also in its SDKs' tests.
    const EXAMPLE_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const EXAMPLE_TIMESTAMP: &str = "1531420618";
    const EXAMPLE_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const EXAMPLE_SIGNATURE: &str =
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn check(
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &str,
        now: i64,
    ) -> Result<(), SignatureError> {
        verify(
            EXAMPLE_SECRET.as_bytes(),
            timestamp,
            signature,
            body.as_bytes(),
            now,
        )
    }

    #[test]
    fn slacks_documented_example_verifies() {
        assert_eq!(
            signature(
                EXAMPLE_SECRET.as_bytes(),
                EXAMPLE_TIMESTAMP,
                EXAMPLE_BODY.as_bytes()
            ),
            EXAMPLE_SIGNATURE
        );
        let at = 1_531_420_618;
        let signed = (Some(EXAMPLE_TIMESTAMP), Some(EXAMPLE_SIGNATURE));
        assert_eq!(check(signed.0, signed.1, EXAMPLE_BODY, at), Ok(()));
        // Within the window on either side, and not one second past it.
        assert_eq!(check(signed.0, signed.1, EXAMPLE_BODY, at + 300), Ok(()));
        assert_eq!(check(signed.0, signed.1, EXAMPLE_BODY, at - 300), Ok(()));
        assert_eq!(
            check(signed.0, signed.1, EXAMPLE_BODY, at + 301),
            Err(SignatureError::Stale)
        );
        // A replay later than five minutes: stale, whatever the signature.
        assert_eq!(
            check(signed.0, signed.1, EXAMPLE_BODY, at + 3600),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn forged_and_unsigned_requests_are_refused() {
        let at = 1_531_420_618;
        // Another body, another timestamp, another secret, a mangled signature.
        assert_eq!(
            check(
                Some(EXAMPLE_TIMESTAMP),
                Some(EXAMPLE_SIGNATURE),
                "token=x",
                at
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            check(
                Some("1531420619"),
                Some(EXAMPLE_SIGNATURE),
                EXAMPLE_BODY,
                at
            ),
            Err(SignatureError::Mismatch)
        );
        let other = signature(
            b"another secret",
            EXAMPLE_TIMESTAMP,
            EXAMPLE_BODY.as_bytes(),
        );
        assert_eq!(
            check(Some(EXAMPLE_TIMESTAMP), Some(&other), EXAMPLE_BODY, at),
            Err(SignatureError::Mismatch)
        );
        for bad in ["", "v0=", "v0=zz", "v1=a2114d57", &EXAMPLE_SIGNATURE[..20]] {
            assert_eq!(
                check(Some(EXAMPLE_TIMESTAMP), Some(bad), EXAMPLE_BODY, at),
                Err(SignatureError::Mismatch),
                "{bad:?}"
            );
        }
        assert_eq!(
            check(None, Some(EXAMPLE_SIGNATURE), EXAMPLE_BODY, at),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            check(Some("soon"), Some(EXAMPLE_SIGNATURE), EXAMPLE_BODY, at),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            check(Some(EXAMPLE_TIMESTAMP), None, EXAMPLE_BODY, at),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn model_text_forms_no_mrkdwn_control_sequence_mention_or_link() {
        let shown =
            mrkdwn("<!channel> <@U123|boss> <https://evil.example|docs> a & b @here evil.com");
        for forbidden in ["<!", "<@", "<http", "evil.com", "@here", "evil.example"] {
            assert!(!shown.contains(forbidden), "{forbidden} in {shown:?}");
        }
        assert!(shown.starts_with("&lt;!channel&gt;"), "{shown}");
        assert!(shown.contains(" a &amp; b "), "{shown}");
        // Warden's own links stay links, and cannot be given a label or break out.
        assert_eq!(
            link("https://github.com/acme/w/blob/abc/src/lib.rs#L1-L2"),
            "<https://github.com/acme/w/blob/abc/src/lib.rs#L1-L2>"
        );
        assert_eq!(
            link("https://x/?a=1&b=<2>|x"),
            "<https://x/?a=1&amp;b=&lt;2&gt;%7Cx>"
        );
    }

    #[test]
    fn requests_are_read_from_mentions() {
        let check = |text: &str, kind: TaskKind, rest: &str| {
            assert_eq!(
                parse_request(text, Some("UBOT")),
                Request {
                    kind,
                    text: rest.to_string()
                },
                "{text:?}"
            );
        };
        check(
            "<@UBOT> why is beta lowercase?",
            TaskKind::Question,
            "why is beta lowercase?",
        );
        check(
            "<@UBOT> ask app what &amp; why",
            TaskKind::Question,
            "app what & why",
        );
        check(
            "<@UBOT> run app make beta uppercase",
            TaskKind::Change,
            "app make beta uppercase",
        );
        check("what changed? <@UBOT>", TaskKind::Question, "what changed?");
        // Before the app knows its own id, a leading mention is still the app's.
        assert_eq!(
            parse_request("<@UOTHER> run app x", None).kind,
            TaskKind::Change
        );
        let known = vec!["app".to_string(), "web".to_string()];
        assert_eq!(
            leading_repo("app@v1 make it so", &known),
            (Some("app@v1".to_string()), "make it so")
        );
        assert_eq!(leading_repo("apple pie?", &known), (None, "apple pie?"));
        assert_eq!(leading_repo("app", &known), (None, "app"));
    }

    #[test]
    fn button_values_are_short_approval_ids() {
        let id = "apr_01HZY8Q6K9V2M3N4P5R6S7T8V9";
        let value = button_value(id).unwrap();
        assert_eq!(value, id);
        assert!(value.len() <= MAX_BUTTON_VALUE_CHARS);
        assert_eq!(button_value(&"a".repeat(MAX_BUTTON_VALUE_CHARS + 1)), None);
        for forged in ["", "apr 1", "apr_1\"}", "<!channel>"] {
            assert_eq!(button_value(forged), None, "{forged:?}");
        }
        for action in [ButtonAction::Approve, ButtonAction::Reject] {
            assert!(action.action_id().len() <= 255);
            assert_eq!(
                ButtonAction::from_action_id(action.action_id()),
                Some(action)
            );
        }
        assert_eq!(ButtonAction::from_action_id("other"), None);
    }
}
