//! A task as a chat shows it: one message per task, edited as the task moves, naming the
//! approval whose Approve/Reject buttons the chat shows while it is pending. Text that came
//! from a model, a repository or a user goes through the chat's [`Style::escape`]; citations
//! are shown as `path:lines @ commit`, with the link Warden built for them
//! ([`Style::link`]).

use serde_json::Value;
use warden_protocol::views::TaskView as Task;

/// How one chat writes text: `escape` makes text from a model, a repository or a user inert
/// in the chat's markup; `link` shows a URL Warden built.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub escape: fn(&str) -> String,
    pub link: fn(&str) -> String,
    /// How the reader answers a task's question here, given the task's id.
    pub answer_hint: fn(&str) -> String,
}

/// The answer hint of a chat that cannot answer: the API or the web console.
pub fn answer_elsewhere(_task: &str) -> String {
    "(Answer with the API or the web console.)".into()
}

const PROMPT_CHARS: usize = 300;
const OUTPUT_TAIL_CHARS: usize = 400;

/// A task's message: its text and, while an approval waits and `buttons` is true, the id of
/// the approval the chat's Approve/Reject buttons decide.
pub fn task_message(task: &Task, buttons: bool, style: Style) -> (String, Option<String>) {
    let inert = style.escape;
    let view = crate::task_view::view_json(task);
    let mut text = String::new();
    let kind = view["kind"].as_str().unwrap_or("task");
    let repos: Vec<&str> = task.repos.iter().map(|r| r.name.as_str()).collect();
    text.push_str(&format!(
        "{} {} on {} — {}\n",
        capitalised(kind),
        task.id,
        repos.join(", "),
        view["status"].as_str().unwrap_or("?")
    ));
    text.push_str(&format!("» {}\n", inert(&clip(&task.prompt, PROMPT_CHARS))));
    let result = &view["result"];
    if let Some(answer) = result.get("answer").filter(|a| a.is_object()) {
        render_answer(answer, &mut text, style);
    }
    if let Some(question) = result["clarification"]["question"].as_str() {
        text.push_str(&format!(
            "\nThe agent asks: {}\n{}\n",
            inert(question),
            (style.answer_hint)(task.id.as_str())
        ));
    }
    if let Some(proposal) = result.get("proposal").filter(|p| p.is_object()) {
        render_proposal(proposal, &mut text, style);
    }
    if let Some(review) = result.get("review").filter(|r| r.is_object()) {
        render_review(review, &mut text, style);
    }
    if result["outcome"] == "no_change" {
        text.push_str("\nNo change was needed.\n");
    }
    if let Some(failure) = result.get("failure").filter(|f| f.is_object()) {
        text.push_str(&format!(
            "\nFailed ({}): {}\n",
            inert(failure["code"].as_str().unwrap_or("?")),
            inert(failure["message"].as_str().unwrap_or(""))
        ));
    }
    let mut markup = None;
    let approval = &result["approval"];
    if approval.is_object() {
        let status = approval["status"].as_str().unwrap_or("?");
        match status {
            "pending" if buttons => {
                markup = approval["id"].as_str().map(str::to_string);
                text.push_str("\nApprove or reject this exact hash with the buttons below.\n");
            }
            "pending" => text.push_str("\nWaiting for an admin to approve this hash.\n"),
            other => {
                let by = approval["decided_by"].as_str().unwrap_or("?");
                text.push_str(&format!("\nApproval {other} by {}.\n", inert(by)));
            }
        }
    }
    if let Some(publication) = result.get("publication").filter(|p| p.is_object()) {
        let status = publication["status"].as_str().unwrap_or("?");
        if status != "not_requested" && status != "awaiting_approval" {
            text.push_str(&format!("Publication: {status}"));
            // The pull request Warden opened: a link Warden built.
            if let Some(url) = publication["pr_url"].as_str() {
                text.push_str(&format!(" {}", (style.link)(url)));
            }
            text.push('\n');
        }
    }
    if let Some(usage) = result.get("usage").filter(|u| u.is_object()) {
        let tokens = usage["input_tokens"].as_u64().unwrap_or(0)
            + usage["output_tokens"].as_u64().unwrap_or(0);
        text.push_str(&format!("\nUsage: {tokens} tokens"));
        if let Some(cost) = usage["cost_usd"].as_f64() {
            text.push_str(&format!(", ${cost:.4}"));
        }
        text.push('\n');
    }
    (text.trim_end().to_string(), markup)
}

/// The message an admin gets for an approval of someone else's task: the task's message with
/// the buttons while it is pending.
pub fn approval_message(task: &Task, style: Style) -> (String, Option<String>) {
    let (text, markup) = task_message(task, true, style);
    (
        format!(
            "Approval requested by {}\n\n{text}",
            (style.escape)(&task.owner)
        ),
        markup,
    )
}

/// The pending approval of `task`'s result: its id and hash.
pub fn pending_approval(task: &Task) -> Option<(String, String)> {
    let approval = task.result.as_ref()?.get("approval")?;
    if approval["status"] != "pending" {
        return None;
    }
    Some((
        approval["id"].as_str()?.to_string(),
        approval["subject_hash"].as_str()?.to_string(),
    ))
}

/// The id of the approval `task`'s result names, whatever its status.
pub fn approval_id(task: &Task) -> Option<String> {
    task.result.as_ref()?["approval"]["id"]
        .as_str()
        .map(str::to_string)
}

fn render_answer(answer: &Value, text: &mut String, style: Style) {
    let inert = style.escape;
    text.push_str(&format!(
        "\n{}\n",
        inert(answer["summary"].as_str().unwrap_or(""))
    ));
    for claim in answer["claims"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "\n• {} ({})\n",
            inert(claim["text"].as_str().unwrap_or("")),
            claim["basis"].as_str().unwrap_or("?")
        ));
        for evidence in claim["evidence"].as_array().into_iter().flatten() {
            let commit = evidence["commit"].as_str().unwrap_or("");
            text.push_str(&format!(
                "  {}{}:{}-{} @ {}\n",
                repo_prefix(evidence, inert),
                inert(evidence["path"].as_str().unwrap_or("?")),
                evidence["start_line"],
                evidence["end_line"],
                &commit[..commit.len().min(12)]
            ));
            // Built by Warden from the repository's browse style, pinned to the commit.
            if let Some(url) = evidence["url"].as_str() {
                text.push_str(&format!("  {}\n", (style.link)(url)));
            }
        }
    }
    let unknown: Vec<&str> = answer["not_established"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !unknown.is_empty() {
        text.push_str("\nNot established:\n");
        for item in unknown {
            text.push_str(&format!("• {}\n", inert(item)));
        }
    }
}

fn repo_prefix(evidence: &Value, inert: fn(&str) -> String) -> String {
    match evidence["repo"].as_str() {
        Some(repo) => format!("{}/", inert(repo)),
        None => String::new(),
    }
}

fn render_proposal(proposal: &Value, text: &mut String, style: Style) {
    let inert = style.escape;
    text.push_str(&format!(
        "\nProposal: {}\n",
        inert(proposal["summary"].as_str().unwrap_or(""))
    ));
    let files: Vec<&str> = proposal["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().or_else(|| f["path"].as_str()))
        .collect();
    if !files.is_empty() {
        text.push_str(&format!("Files: {}\n", inert(&files.join(", "))));
    }
    if let Some(stat) = proposal["diff_stat"].as_str() {
        text.push_str(&format!("{}\n", inert(stat.trim())));
    }
    let validations = proposal["validations"].as_array();
    if let Some(validations) = validations.filter(|v| !v.is_empty()) {
        text.push_str("Validations:\n");
        for validation in validations {
            let code = validation["exit_code"].as_i64();
            let mark = if code == Some(0) { "✓" } else { "✗" };
            text.push_str(&format!(
                "{mark} {} (exit {}, {} ms, {})\n",
                inert(validation["command"].as_str().unwrap_or("?")),
                code.map_or("?".to_string(), |c| c.to_string()),
                validation["duration_ms"],
                inert(validation["sandbox"].as_str().unwrap_or("?"))
            ));
            if code != Some(0) {
                let tail = validation["output_tail"].as_str().unwrap_or("");
                let start = tail.len().saturating_sub(OUTPUT_TAIL_CHARS);
                let start = (start..=tail.len())
                    .find(|&i| tail.is_char_boundary(i))
                    .unwrap_or(tail.len());
                text.push_str(&format!("{}\n", inert(&tail[start..])));
            }
        }
    }
    if let Some(hash) = proposal["hash"].as_str() {
        text.push_str(&format!("Hash: {hash}\n"));
    }
}

/// Findings a chat message lists; the rest are counted.
const MAX_CHAT_FINDINGS: usize = 5;

/// The reviewer's verdict and its most urgent findings (`review` of a change's result).
fn render_review(review: &Value, text: &mut String, style: Style) {
    let inert = style.escape;
    let findings = review["findings"].as_array().cloned().unwrap_or_default();
    text.push_str(&format!(
        "Review: {} after {} round(s), {} finding(s)\n",
        inert(review["verdict"].as_str().unwrap_or("?")),
        review["rounds"].as_u64().unwrap_or(0),
        findings.len()
    ));
    for finding in findings.iter().take(MAX_CHAT_FINDINGS) {
        let location = &finding["location"];
        let (start, end) = (
            location["start_line"].as_u64().unwrap_or(0),
            location["end_line"].as_u64().unwrap_or(0),
        );
        let lines = if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        };
        text.push_str(&format!(
            "[P{}] {} — {}:{lines}\n",
            finding["priority"].as_u64().unwrap_or(3),
            inert(finding["title"].as_str().unwrap_or("?")),
            inert(location["path"].as_str().unwrap_or("?"))
        ));
    }
    if findings.len() > MAX_CHAT_FINDINGS {
        text.push_str(&format!(
            "… and {} more\n",
            findings.len() - MAX_CHAT_FINDINGS
        ));
    }
}

fn capitalised(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn clip(text: &str, max_chars: usize) -> String {
    let mut chars = text.chars();
    let clipped: String = chars.by_ref().take(max_chars).collect();
    if chars.next().is_some() {
        format!("{clipped}…")
    } else {
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_protocol::{TaskKind, TaskStatus};

    fn shouting(text: &str) -> String {
        text.to_uppercase()
    }

    const SHOUTING: Style = Style {
        escape: shouting,
        link: str::to_string,
        answer_hint: answer_elsewhere,
    };

    #[test]
    fn a_changes_review_is_shown_with_its_most_urgent_findings_escaped() {
        let findings: Vec<Value> = (0..7)
            .map(|n| {
                json!({"title": format!("finding {n}"), "body": "b", "priority": 1,
                       "confidence": 0.9, "location": {"repo": "app", "commit": "c",
                       "path": "src/a.rs", "start_line": 4, "end_line": 4 + n}})
            })
            .collect();
        let task = Task {
            id: "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".parse().unwrap(),
            kind: TaskKind::Change,
            status: TaskStatus::Completed,
            owner: "alice".into(),
            prompt: "fix it".into(),
            repos: vec![],
            created_at: warden_protocol::views::Timestamp(0),
            updated_at: warden_protocol::views::Timestamp(0),
            follow_up_to: None,
            retry_of: None,
            result: Some(json!({"outcome": "no_change",
                "review": {"verdict": "reported", "explanation": "", "rounds": 2,
                           "model": "m", "findings": findings, "usage": {}}})),
            metadata: json!({}),
            runs: 1,
        };
        let (text, _) = task_message(&task, false, SHOUTING);
        assert!(
            text.contains("Review: REPORTED after 2 round(s), 7 finding(s)\n"),
            "{text}"
        );
        assert!(text.contains("[P1] FINDING 0 — SRC/A.RS:4\n"), "{text}");
        assert!(text.contains("[P1] FINDING 4 — SRC/A.RS:4-8\n"), "{text}");
        assert!(!text.contains("FINDING 5"), "{text}");
        assert!(text.contains("… and 2 more\n"), "{text}");
    }
}
