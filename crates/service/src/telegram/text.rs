//! What the bot reads and writes as text: commands parsed from a message and the data of
//! inline buttons (at most 64 bytes). Making text inert and splitting it are the chats'
//! ([`crate::chat::text`]).

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const MAX_MESSAGE_UNITS: usize = 4096;
/// Telegram's limit on a button's `callback_data`, in bytes.
pub const MAX_CALLBACK_DATA_BYTES: usize = 64;

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
    /// `/answer task text`: answers the question a task waiting for input asked.
    Answer { task: String, text: String },
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
        "/answer" if !first.is_empty() && !remainder.is_empty() => Command::Answer {
            task: first.to_string(),
            text: remainder.to_string(),
        },
        "/answer" => Command::Incomplete("/answer TASK YOUR ANSWER"),
        "/usage" => Command::Usage,
        "/repos" => Command::Repos,
        _ => Command::Help,
    }
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
        check_command(
            "/answer tsk_1 yes, the staging one",
            Command::Answer {
                task: "tsk_1".into(),
                text: "yes, the staging one".into(),
            },
        );
        check_command(
            "/answer tsk_1",
            Command::Incomplete("/answer TASK YOUR ANSWER"),
        );
        check_command("/usage", Command::Usage);
        check_command("/repos@WardenBot", Command::Repos);
        check_command("/start", Command::Help);
        check_command("hello", Command::Help);
        check_command("", Command::Help);
        check_command("/askapp x", Command::Help);
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
