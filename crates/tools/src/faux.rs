//! The faux runner (`WARDEN_MODEL=faux`): a deterministic investigator that needs no language
//! model. It lists the working root, searches for the most distinctive word of the question,
//! reads around the first match and submits a small answer citing exactly the lines it read.
//! It exists for demos and tests, parses the tools' documented output formats, and labels every
//! answer it gives as coming from no model.

use serde_json::json;
use warden_runtime::{
    BoxFuture, Cost, EventSink, Message, Model, ModelError, ModelRequest, ModelResponse,
    TokenUsage, ToolCall,
};

/// Prefix of every faux summary, so nobody mistakes it for a model's answer.
pub const FAUX_LABEL: &str = "[faux runner: no language model was used]";

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
        let (name, arguments) = next_step(&request.messages);
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
