//! The faux runner (`WARDEN_MODEL=faux`): a deterministic agent that needs no language model.
//! For a question it lists the working root, searches for the most distinctive word of the
//! question, reads around the first match and submits a small answer citing exactly the lines
//! it read. For a change (the `submit_change` tool is offered) it writes one labelled note,
//! [`FAUX_CHANGE_FILE`], and submits it, so the whole change pipeline (edit, checks, proposal,
//! diff, approval) can be tried without a model; if the note cannot be written the submission
//! finds nothing changed (`no_change`). It exists for demos and tests, parses the tools'
//! documented output formats, and labels everything it produces as coming from no model.

use serde_json::json;
use warden_runtime::{
    BoxFuture, Cost, EventSink, Message, Model, ModelError, ModelRequest, ModelResponse,
    TokenUsage, ToolCall,
};

/// Prefix of every faux summary, so nobody mistakes it for a model's answer.
pub const FAUX_LABEL: &str = "[faux runner: no language model was used]";

/// The file a faux change writes at the repository root.
pub const FAUX_CHANGE_FILE: &str = "WARDEN-FAUX-CHANGE.md";

const STOPWORDS: &[&str] = &[
    "what",
    "does",
    "where",
    "which",
    "when",
    "this",
    "that",
    "with",
    "from",
    "have",
    "work",
    "works",
    "there",
    "their",
    "about",
    "into",
    "how",
    "why",
    "the",
    "and",
    "for",
    "are",
    "code",
    "file",
    "files",
    "repository",
    "repo",
    "function",
    "defined",
    "used",
    "show",
    "explain",
    "should",
    "would",
    "could",
    "them",
    "then",
    "than",
    "they",
    "some",
    "your",
];

/// The deterministic no-model runner.
#[derive(Debug, Default, Clone)]
pub struct FauxModel;

impl Model for FauxModel {
    fn name(&self) -> String {
        "faux".into()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        _events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let change = request.tools.iter().any(|t| t.name == "submit_change");
        let (name, arguments) = if change {
            next_change_step(&request.messages)
        } else {
            next_step(&request.messages)
        };
        let call = ToolCall {
            id: format!("faux_{}", request.messages.len()),
            name: name.to_string(),
            arguments: arguments.to_string(),
        };
        let raw = json!({"faux": {"tool": name, "arguments": arguments}});
        Box::pin(async move {
            Ok(ModelResponse {
                model: "faux".into(),
                text: None,
                tool_calls: vec![call],
                usage: Some(TokenUsage::default()),
                cost: Cost::Known { micro_usd: 0 },
                stop_reason: Some("tool_calls".into()),
                raw,
            })
        })
    }

    fn has_price(&self) -> bool {
        true
    }
}

/// The last tool call of the conversation and its result.
fn last_exchange(messages: &[Message]) -> Option<(&ToolCall, &str, bool)> {
    let (content, is_error, call_id) = messages.iter().rev().find_map(|m| match m {
        Message::Tool {
            call_id,
            content,
            is_error,
        } => Some((content.as_str(), *is_error, call_id.as_str())),
        _ => None,
    })?;
    let call = messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls.iter().find(|c| c.id == call_id),
        _ => None,
    })?;
    Some((call, content, is_error))
}

fn question(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { text } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The most distinctive word of the question: the longest identifier-like word not in the
/// stopword list (ties broken by first occurrence).
fn search_term(question: &str) -> Option<String> {
    let mut best: Option<&str> = None;
    for word in question.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.len() < 4 || STOPWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            continue;
        }
        if best.is_none_or(|b| word.len() > b.len()) {
            best = Some(word);
        }
    }
    best.map(str::to_string)
}

fn next_step(messages: &[Message]) -> (&'static str, serde_json::Value) {
    let asked = question(messages);
    let Some((call, content, is_error)) = last_exchange(messages) else {
        return ("list_dir", json!({"path": "."}));
    };
    match call.name.as_str() {
        "list_dir" => match search_term(&asked) {
            Some(term) => ("search", json!({"pattern": term, "literal": true})),
            None => read_first_file(content, &asked),
        },
        "search" => {
            let hit = if is_error { None } else { first_match(content) };
            match hit {
                Some((path, line)) => (
                    "read_file",
                    json!({"path": path, "start_line": line.saturating_sub(3).max(1), "end_line": line + 3}),
                ),
                None => {
                    let listing = listing(messages).unwrap_or_default();
                    read_first_file(&listing, &asked)
                }
            }
        }
        "read_file" if !is_error => match read_header(content) {
            Some((path, start, end)) => submit(&asked, Some((&path, start, end))),
            None => submit(&asked, None),
        },
        _ => submit(&asked, None),
    }
}

/// A change: write the note, then submit it (again after a rejection: the checks decide).
fn next_change_step(messages: &[Message]) -> (&'static str, serde_json::Value) {
    let asked = question(messages);
    match last_exchange(messages) {
        None => (
            "write_file",
            json!({"path": FAUX_CHANGE_FILE, "content": change_note(&asked)}),
        ),
        Some(_) => (
            "submit_change",
            // The summary is the proposal's commit message: a short first line, then details.
            json!({"summary": format!(
                "{FAUX_LABEL} Wrote {FAUX_CHANGE_FILE}\n\nA note naming the request {asked:?}, \
                 to exercise the change pipeline. It does not implement the request."
            )}),
        ),
    }
}

fn change_note(asked: &str) -> String {
    format!(
        "# Faux change\n\n{FAUX_LABEL}\n\nWarden's faux runner wrote this file to exercise the \
         change pipeline (edit, checks, proposal, approval) without a language model. It does \
         not implement the request.\n\nRequest:\n\n> {}\n",
        asked.trim().replace('\n', "\n> ")
    )
}

fn listing(messages: &[Message]) -> Option<String> {
    let call_id = messages.iter().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| c.name == "list_dir")
            .map(|c| c.id.clone()),
        _ => None,
    })?;
    messages.iter().find_map(|m| match m {
        Message::Tool {
            call_id: id,
            content,
            is_error: false,
        } if *id == call_id => Some(content.clone()),
        _ => None,
    })
}

fn read_first_file(listing: &str, asked: &str) -> (&'static str, serde_json::Value) {
    let file = listing
        .lines()
        .find(|l| !l.is_empty() && !l.ends_with('/') && !l.starts_with('['));
    match file {
        Some(path) => (
            "read_file",
            json!({"path": path, "start_line": 1, "end_line": 10}),
        ),
        None => submit(asked, None),
    }
}

/// `path:line:text` → (path, line).
fn first_match(output: &str) -> Option<(String, u64)> {
    output.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let path = parts.next()?;
        let number = parts.next()?.parse::<u64>().ok()?;
        parts.next()?;
        Some((path.to_string(), number))
    })
}

/// `path (lines A-B of N)` → (path, A, B).
fn read_header(output: &str) -> Option<(String, u64, u64)> {
    let first = output.lines().next()?;
    let (path, rest) = first.rsplit_once(" (lines ")?;
    let range = rest.split(" of ").next()?;
    let (start, end) = range.split_once('-')?;
    Some((path.to_string(), start.parse().ok()?, end.parse().ok()?))
}

fn submit(asked: &str, cited: Option<(&str, u64, u64)>) -> (&'static str, serde_json::Value) {
    let summary = format!(
        "{FAUX_LABEL} A deterministic investigation of {asked:?}: it listed the repository, \
         searched for the question's most distinctive word and read around the first match. \
         It does not understand the code."
    );
    match cited {
        Some((path, start, end)) => (
            "submit_answer",
            json!({
                "summary": summary,
                "claims": [{
                    "text": format!("{path} lines {start}-{end} are the first place the search found."),
                    "basis": "observed",
                    "evidence": [{"path": path, "start_line": start, "end_line": end}]
                }],
                "not_established": ["the answer to the question itself: the faux runner does not reason"]
            }),
        ),
        None => (
            "submit_answer",
            json!({
                "summary": summary,
                "claims": [{"text": "No relevant line was found to cite.", "basis": "inferred"}],
                "not_established": ["the answer to the question itself: the faux runner does not reason"]
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(name: &str, content: &str, is_error: bool) -> [Message; 2] {
        [
            Message::Assistant {
                text: None,
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: name.into(),
                    arguments: "{}".into(),
                }],
            },
            Message::Tool {
                call_id: "c1".into(),
                content: content.into(),
                is_error,
            },
        ]
    }

    #[test]
    fn a_change_writes_a_labelled_note_then_submits_it() {
        let mut messages = vec![Message::User {
            text: "fix the flaky retry test".into(),
        }];
        let (tool, arguments) = next_change_step(&messages);
        assert_eq!(tool, "write_file");
        assert_eq!(arguments["path"], FAUX_CHANGE_FILE);
        let content = arguments["content"].as_str().unwrap();
        assert!(content.contains(FAUX_LABEL), "{content}");
        assert!(content.contains("> fix the flaky retry test"), "{content}");
        // Deterministic: the same request writes the same note.
        assert_eq!(next_change_step(&messages), (tool, arguments));
        messages.extend(reply("write_file", "wrote 200 bytes", false));
        let (tool, arguments) = next_change_step(&messages);
        assert_eq!(tool, "submit_change");
        let summary = arguments["summary"].as_str().unwrap();
        assert!(summary.starts_with(FAUX_LABEL));
        // A commit message: a short subject line, then the details.
        let subject = summary.lines().next().unwrap();
        assert_eq!(
            subject,
            format!("{FAUX_LABEL} Wrote {FAUX_CHANGE_FILE}"),
            "{summary}"
        );
        assert!(
            summary.contains("\"fix the flaky retry test\""),
            "{summary}"
        );
        // After a rejected submission (failing checks) it submits again: the checks decide.
        messages.extend(reply("submit_change", "checks failed", true));
        assert_eq!(next_change_step(&messages).0, "submit_change");
    }

    #[test]
    fn picks_the_longest_distinctive_word() {
        assert_eq!(
            search_term("how does the retry_policy work?").as_deref(),
            Some("retry_policy")
        );
        assert_eq!(search_term("what is it"), None);
    }

    #[test]
    fn parses_tool_formats() {
        assert_eq!(
            first_match("src/a.rs:12:fn x() {}\n[... more]"),
            Some(("src/a.rs".into(), 12))
        );
        assert_eq!(first_match("no matches for x"), None);
        assert_eq!(
            read_header("src/a.rs (lines 9-15 of 40)\n     9\tx"),
            Some(("src/a.rs".into(), 9, 15))
        );
    }
}
