//! What the bot reads and writes as text: commands parsed from a message, messages split at
//! Telegram's 4,096-character limit (counted in UTF-16 code units, as Telegram counts), text
//! from a repository or a model made inert (no mentions, no links), and the data of inline
//! buttons (at most 64 bytes).

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const MAX_MESSAGE_UNITS: usize = 4096;
/// Telegram's limit on a button's `callback_data`, in bytes.
pub const MAX_CALLBACK_DATA_BYTES: usize = 64;

/// U+2060 WORD JOINER: invisible, and breaks Telegram's detection of mentions and links.
const JOINER: char = '\u{2060}';

/// A command as the user typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/ask repo question`
    Ask { repo: String, question: String },
    /// `/run repo task`: a change, published after an approval.
    Run { repo: String, request: String },
    /// `/status [task]`: one task, the latest when none is named.
    Status { task: Option<String> },
    /// `/tasks`: the latest tasks.
    Tasks,
    /// `/cancel task`
    Cancel { task: String },
    /// `/retry task`
    Retry { task: String },
    /// `/usage`: today's spend.
    Usage,
    /// `/repos`: the registered repositories.
    Repos,
    /// `/start`, `/help`, or anything else: what the bot does.
    Help,
    /// A command missing what it needs: the usage line to show.
    Incomplete(&'static str),
}

/// Parses a message's text. `/cmd@BotName` is accepted as `/cmd`; text that is no command is
/// [`Command::Help`].
pub fn parse_command(text: &str) -> Command {
    let text = text.trim();
    let (head, rest) = match text.find(char::is_whitespace) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    let name = head.split('@').next().unwrap_or_default();
    let (first, remainder) = match rest.find(char::is_whitespace) {
        Some(at) => (&rest[..at], rest[at..].trim()),
        None => (rest, ""),
    };
    let one = || (!first.is_empty()).then(|| first.to_string());
    match name {
        "/ask" if !first.is_empty() && !remainder.is_empty() => Command::Ask {
            repo: first.to_string(),
            question: remainder.to_string(),
        },
        "/ask" => Command::Incomplete("/ask REPO QUESTION"),
        "/run" if !first.is_empty() && !remainder.is_empty() => Command::Run {
            repo: first.to_string(),
            request: remainder.to_string(),
        },
        "/run" => Command::Incomplete("/run REPO WHAT TO CHANGE"),
        "/status" => Command::Status { task: one() },
        "/tasks" => Command::Tasks,
        "/cancel" => match one() {
            Some(task) => Command::Cancel { task },
            None => Command::Incomplete("/cancel TASK"),
        },
        "/retry" => match one() {
            Some(task) => Command::Retry { task },
            None => Command::Incomplete("/retry TASK"),
        },
        "/usage" => Command::Usage,
        "/repos" => Command::Repos,
        _ => Command::Help,
    }
}

/// Text from a repository, a model or a user, made inert for a plain-text message: an
/// invisible word joiner after `@` (no mention), inside `://` and `www.` and before a `.`
/// between word characters (no link Telegram would detect: `evil.com`, `https://x`). Warden
/// sends no `parse_mode`, so nothing else in the text is markup. Only links Warden built
/// itself (citation URLs, a pull request it opened) are left as they are, by the caller.
pub fn inert(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if c == '.' && word(prev) && word(next) {
            out.push(JOINER);
        }
        out.push(c);
        match c {
            '@' => out.push(JOINER),
            ':' if next == Some('/') => out.push(JOINER),
            _ => {}
        }
    }
    out
}

/// `text` in pieces of at most `max_units` UTF-16 code units, cut after the last newline that
/// fits (else the last space, else anywhere between two characters: a character is never cut,
/// surrogate pairs included). Empty text is one piece `"…"` (Telegram refuses empty text).
pub fn split_message(text: &str, max_units: usize) -> Vec<String> {
    let max_units = max_units.max(2);
    if text.is_empty() {
        return vec!["…".to_string()];
    }
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut units = 0;
        let mut end = rest.len();
        let mut last_newline = None;
        let mut last_space = None;
        for (at, c) in rest.char_indices() {
            if units + c.len_utf16() > max_units {
                end = at;
                break;
            }
            units += c.len_utf16();
            if c == '\n' {
                last_newline = Some(at + 1);
            } else if c == ' ' {
                last_space = Some(at + 1);
            }
        }
        if end < rest.len() {
            end = last_newline
                .or(last_space)
                .filter(|&e| e > 0)
                .unwrap_or(end);
        }
        let (piece, remainder) = rest.split_at(end);
        pieces.push(piece.to_string());
        rest = remainder;
    }
    pieces
}

/// UTF-16 code units of `text`, as Telegram counts a message's length.
#[cfg(test)]
fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// What a button does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ButtonAction {
    Approve { approval: String },
    Reject { approval: String },
}

/// A button's `callback_data`: `a:<approval id>` or `r:<approval id>`; `None` when it would
/// pass Telegram's 64 bytes (the caller then shows no buttons).
pub fn callback_data(action: &ButtonAction) -> Option<String> {
    let data = match action {
        ButtonAction::Approve { approval } => format!("a:{approval}"),
        ButtonAction::Reject { approval } => format!("r:{approval}"),
    };
    (data.len() <= MAX_CALLBACK_DATA_BYTES).then_some(data)
}

/// The action of a button's `callback_data`, if it is one the bot made.
pub fn parse_callback_data(data: &str) -> Option<ButtonAction> {
    if data.len() > MAX_CALLBACK_DATA_BYTES {
        return None;
    }
    let (kind, approval) = data.split_once(':')?;
    if approval.is_empty()
        || !approval
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let approval = approval.to_string();
    match kind {
        "a" => Some(ButtonAction::Approve { approval }),
        "r" => Some(ButtonAction::Reject { approval }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_command(text: &str, expected: Command) {
        assert_eq!(parse_command(text), expected, "{text:?}");
    }

    #[test]
    fn commands_are_parsed_with_their_arguments() {
        check_command(
            "/ask app  why is beta lowercase?\nand more",
            Command::Ask {
                repo: "app".into(),
                question: "why is beta lowercase?\nand more".into(),
            },
        );
        check_command(
            "/ask@WardenBot app@v1 what?",
            Command::Ask {
                repo: "app@v1".into(),
                question: "what?".into(),
            },
        );
        check_command("/ask app", Command::Incomplete("/ask REPO QUESTION"));
        check_command(
            "/run app make beta uppercase",
            Command::Run {
                repo: "app".into(),
                request: "make beta uppercase".into(),
            },
        );
        check_command("/run", Command::Incomplete("/run REPO WHAT TO CHANGE"));
        check_command("/status", Command::Status { task: None });
        check_command(
            "/status tsk_1",
            Command::Status {
                task: Some("tsk_1".into()),
            },
        );
        check_command("/tasks", Command::Tasks);
        check_command(
            "/cancel tsk_1",
            Command::Cancel {
                task: "tsk_1".into(),
            },
        );
        check_command("/cancel", Command::Incomplete("/cancel TASK"));
        check_command(
            "/retry tsk_1",
            Command::Retry {
                task: "tsk_1".into(),
            },
        );
        check_command("/usage", Command::Usage);
        check_command("/repos@WardenBot", Command::Repos);
        check_command("/start", Command::Help);
        check_command("hello", Command::Help);
        check_command("", Command::Help);
        check_command("/askapp x", Command::Help);
    }

    #[test]
    fn split_counts_utf16_units_and_never_cuts_a_character() {
        // Short text: one piece, unchanged.
        assert_eq!(split_message("hi", MAX_MESSAGE_UNITS), ["hi"]);
        assert_eq!(split_message("", MAX_MESSAGE_UNITS), ["…"]);
        // Exactly at the limit: one piece; one more unit: two.
        let full = "a".repeat(MAX_MESSAGE_UNITS);
        assert_eq!(split_message(&full, MAX_MESSAGE_UNITS).len(), 1);
        let over = "a".repeat(MAX_MESSAGE_UNITS + 1);
        let pieces = split_message(&over, MAX_MESSAGE_UNITS);
        assert_eq!(
            pieces.iter().map(|p| utf16_len(p)).collect::<Vec<_>>(),
            [MAX_MESSAGE_UNITS, 1]
        );
        // An emoji is two UTF-16 units (four UTF-8 bytes): 2,048 of them fill a message, and
        // one more spills over whole.
        let emoji = "😀".repeat(MAX_MESSAGE_UNITS / 2 + 1);
        let pieces = split_message(&emoji, MAX_MESSAGE_UNITS);
        assert_eq!(pieces.len(), 2);
        assert_eq!(utf16_len(&pieces[0]), MAX_MESSAGE_UNITS);
        assert_eq!(pieces[1], "😀");
        // An odd limit cannot hold half a pair: the piece stops before it.
        let pieces = split_message("a😀😀", 4);
        assert_eq!(pieces, ["a😀", "😀"]);
        // Cut after the last newline that fits, else the last space.
        assert_eq!(split_message("one\ntwo three", 9), ["one\n", "two three"]);
        assert_eq!(split_message("one two three", 9), ["one two ", "three"]);
        // Nothing is lost.
        let text = "line\n".repeat(2000) + &"ü".repeat(5000);
        let pieces = split_message(&text, MAX_MESSAGE_UNITS);
        assert!(pieces.iter().all(|p| utf16_len(p) <= MAX_MESSAGE_UNITS));
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn model_text_has_no_mentions_or_links() {
        let shown = inert("ping @admin, see https://evil.example/x or www.evil.com and evil.com");
        for link in ["@admin", "https://", "evil.example", "www.evil", "evil.com"] {
            assert!(!shown.contains(link), "{link} in {shown:?}");
        }
        // It reads the same once the invisible joiners are gone.
        assert_eq!(
            shown.replace(JOINER, ""),
            "ping @admin, see https://evil.example/x or www.evil.com and evil.com"
        );
        // Sentences and numbers keep their look; plain text has no other markup.
        assert_eq!(
            inert("It ends. Next *bold* <b>x</b>"),
            "It ends. Next *bold* <b>x</b>"
        );
    }

    #[test]
    fn callback_data_fits_in_64_bytes_and_round_trips() {
        let approval = "apr_01HZY8Q6K9V2M3N4P5R6S7T8V9".to_string();
        for action in [
            ButtonAction::Approve {
                approval: approval.clone(),
            },
            ButtonAction::Reject {
                approval: approval.clone(),
            },
        ] {
            let data = callback_data(&action).unwrap();
            assert!(data.len() <= MAX_CALLBACK_DATA_BYTES);
            assert_eq!(parse_callback_data(&data), Some(action));
        }
        let long = ButtonAction::Approve {
            approval: "x".repeat(63),
        };
        assert_eq!(callback_data(&long), None);
        for forged in [
            "",
            "a:",
            "x:apr_1",
            "a:apr 1",
            "a:apr_1:2",
            &format!("a:{}", "y".repeat(70)),
        ] {
            assert_eq!(parse_callback_data(forged), None, "{forged:?}");
        }
    }
}
