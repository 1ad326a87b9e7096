//! `warden logs`: a run journal as a timeline a person can read — turns, tool calls with their
//! durations, rejections and denials, checks, limits, the outcome and its spend — one line a
//! step, times relative to the run's start. `--json` prints the raw records instead. Journal
//! text comes from the model and the repository: every line is escaped for the terminal.

use serde_json::Value;

use crate::text;

/// At most this many characters of a tool's output or an argument are shown on a line.
const PREVIEW: usize = 100;

/// The timeline of one run's journal records (each `{seq, at_ms, kind, payload, …}` as a local
/// journal holds them, or with `at` as RFC 3339 text as the API sends them).
pub fn render(records: &[Value]) -> String {
    let Some(start) = records.first().and_then(at_ms) else {
        return "  (no records)\n".into();
    };
    let mut out = String::new();
    // When each tool call was allowed to run, by call id: its duration ends at the observation.
    let mut started: Vec<(String, u64)> = Vec::new();
    for record in records {
        let at = at_ms(record).unwrap_or(start);
        let payload = &record["payload"];
        let kind = record["kind"].as_str().unwrap_or_default();
        let Some(line) = step(kind, payload, at, &mut started) else {
            continue;
        };
        let elapsed = at.saturating_sub(start);
        out.push_str(&format!(
            "{:>4}.{:03}s  {}\n",
            elapsed / 1000,
            elapsed % 1000,
            text::block(&line, "            ")
        ));
    }
    out
}

fn step(kind: &str, payload: &Value, at: u64, started: &mut Vec<(String, u64)>) -> Option<String> {
    let tool = payload["tool"].as_str().unwrap_or("?");
    Some(match kind {
        "run_started" => {
            let model = payload["model"].as_str().unwrap_or("?");
            let repos: Vec<String> = payload["context"]["manifest"]
                .as_array()
                .map(|m| {
                    m.iter()
                        .map(|r| {
                            format!(
                                "{}@{}",
                                r["repo"].as_str().unwrap_or("?"),
                                text::short_commit(r["commit"].as_str().unwrap_or("?"))
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!("run started · model {model} · {}", repos.join(", "))
        }
        "model_requested" => format!("turn {}: asking the model", payload["turn"]),
        "model_decision" => {
            let calls: Vec<&str> = payload["tool_calls"]
                .as_array()
                .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
                .unwrap_or_default();
            let usage = &payload["usage"];
            let cost = match payload["cost"]["micro_usd"].as_u64() {
                Some(micro) => format!("${:.4}", micro as f64 / 1e6),
                None => "cost unknown".into(),
            };
            let input = usage["input_tokens"].as_u64().unwrap_or(0);
            let mut line = format!(
                "  model {} → {} · {input}{} in / {} out tokens · {cost}",
                payload["model"].as_str().unwrap_or("?"),
                if calls.is_empty() {
                    "no tool call".to_string()
                } else {
                    calls.join(", ")
                },
                crate::text::cache_note(
                    usage["cached_input_tokens"].as_u64().unwrap_or(0),
                    usage["cache_write_tokens"].as_u64().unwrap_or(0),
                    input
                ),
                usage["output_tokens"].as_u64().unwrap_or(0),
            );
            if let Some(said) = payload["text"].as_str().filter(|t| !t.trim().is_empty()) {
                line.push_str(&format!("\n  says: {}", preview(said)));
            }
            line
        }
        "model_failed" => format!("  ✗ model failed: {}", preview_value(&payload["error"])),
        "arguments_rejected" => format!(
            "    ✗ {tool} call rejected: {}",
            preview(&strings(&payload["errors"]).join("; "))
        ),
        "policy_verdict" => {
            let verdict = &payload["verdict"];
            if let Some(reason) = verdict["deny"].as_str() {
                format!("    ✗ {tool} denied: {}", preview(reason))
            } else if let Some(reason) = verdict["abort"].as_str() {
                format!("    ✗ {tool} aborted the run: {}", preview(reason))
            } else if let Some(reason) = verdict["require_approval"].as_str() {
                format!("    ! {tool} needs an approval: {}", preview(reason))
            } else {
                let id = payload["call_id"].as_str().unwrap_or_default().to_string();
                started.push((id, at));
                return None;
            }
        }
        "tool_observation" => {
            let id = payload["call_id"].as_str().unwrap_or_default();
            let took = started
                .iter()
                .rposition(|(call, _)| call == id)
                .map(|index| at.saturating_sub(started.remove(index).1));
            let took = took.map(|ms| format!(" ({ms} ms)")).unwrap_or_default();
            let output = &payload["output"];
            let (mark, detail) = if let Some(ok) = output["ok"].as_str() {
                ("→", first_line(ok))
            } else if let Some(error) = output["error"].as_str() {
                ("✗", first_line(error))
            } else if output["rejected"].is_array() {
                ("✗", "rejected".to_string())
            } else if output.get("answer").is_some() {
                ("✓", "answer accepted".to_string())
            } else if let Some(question) = output["clarification"].as_str() {
                ("?", format!("asks: {}", preview(question)))
            } else if output.get("change").is_some() {
                ("✓", "change accepted".to_string())
            } else {
                ("→", String::new())
            };
            format!("    {mark} {tool}{took}: {detail}")
        }
        "submission_rejected" => format!(
            "    ✗ submission {} rejected:\n- {}",
            payload["attempt"],
            strings(&payload["errors"]).join("\n- ")
        ),
        "limit_reached" => format!(
            "  ✗ limit reached: {}",
            preview_value(&payload["failure"]["message"])
        ),
        "run_finished" => {
            let outcome = &payload["outcome"];
            let ended = if outcome.get("answer").is_some() {
                "answered".to_string()
            } else if outcome.get("change").is_some() {
                "proposed a change".to_string()
            } else if let Some(question) = outcome["clarification"].as_str() {
                format!("needs an answer: {}", preview(question))
            } else if let Some(failure) = outcome.get("failure") {
                format!(
                    "failed: {} — {}",
                    failure["code"].as_str().unwrap_or("?"),
                    preview_value(&failure["message"])
                )
            } else if outcome.get("awaiting_approval").is_some() {
                "waits for an approval".to_string()
            } else {
                "ended".to_string()
            };
            let usage = &payload["usage"];
            let cost = match usage["cost_usd"].as_f64() {
                Some(cost) => format!("${cost:.4}"),
                None => "cost unknown".into(),
            };
            let input = usage["input_tokens"].as_u64().unwrap_or(0);
            format!(
                "run finished: {ended} · {} · {} · {input}{} in / {} out tokens · {cost}",
                crate::text::count(
                    usage["model_calls"].as_u64().unwrap_or(0),
                    "model call",
                    "model calls"
                ),
                crate::text::count(
                    usage["tool_calls"].as_u64().unwrap_or(0),
                    "tool call",
                    "tool calls"
                ),
                crate::text::cache_note(
                    usage["cached_input_tokens"].as_u64().unwrap_or(0),
                    usage["cache_write_tokens"].as_u64().unwrap_or(0),
                    input
                ),
                usage["output_tokens"].as_u64().unwrap_or(0),
            )
        }
        "approval_decided" => approval_line(payload),
        "side_effect_intent" => intent_line(payload),
        "side_effect_outcome" => outcome_line(payload),
        "explorer_started" => format!(
            "  ◇ explorer {} sent: {}",
            payload["context"]["explorer"],
            preview_value(&payload["messages"][1]["text"])
        ),
        "explorer_finished" => format!("  ◇ explorer back: {}", preview_value(&payload["outcome"])),
        "message_delivered" => format!(
            "  ✉ message {} from {} delivered before turn {}",
            payload["seq"],
            text::one_line(payload["author"].as_str().unwrap_or("?")),
            payload["turn"]
        ),
        "compacted" => format!(
            "  ◆ context compacted ({}): about {} → {} tokens{}",
            payload["attempt"],
            payload["tokens_before"],
            payload["tokens_after"],
            if payload["shrunk"] == false {
                ", still above the trigger"
            } else {
                ""
            }
        ),
        "gate_decided" => gate_line(payload),
        "review" => review_line(payload),
        other => format!("{other}: {}", preview_value(payload)),
    })
}

/// The risk gate's decision: the request's before the run, the proposal's paths after it.
fn gate_line(payload: &Value) -> String {
    let proposal = payload["stage"] == "proposal";
    let decided = if proposal {
        &payload["proposal"]
    } else {
        payload
    };
    let mut line = format!(
        "◆ risk gate ({}): {} → {}",
        if proposal { "proposal" } else { "request" },
        word(decided, "level"),
        word(decided, "action")
    );
    for reason in decided["reasons"].as_array().into_iter().flatten() {
        line.push_str(&format!(
            "\n    {} {}: {}",
            word(reason, "level"),
            word(reason, "rule"),
            word(reason, "detail")
        ));
    }
    if let Some(approval) = payload["approval"]["id"].as_str().filter(|_| !proposal) {
        line.push_str(&format!(
            "\n    waits for approval {}",
            text::one_line(approval)
        ));
    }
    line
}

/// A review round: its verdict and the findings, most urgent first (at most five).
fn review_line(payload: &Value) -> String {
    let findings = payload["findings"].as_array().cloned().unwrap_or_default();
    let mut line = format!(
        "◆ review {}: {} · {}",
        payload["round"],
        word(payload, "verdict"),
        text::count(findings.len() as u64, "finding", "findings")
    );
    let mut sorted: Vec<&Value> = findings.iter().collect();
    sorted.sort_by_key(|f| f["priority"].as_u64().unwrap_or(3));
    for finding in sorted.iter().take(5) {
        let at = &finding["location"];
        line.push_str(&format!(
            "\n    P{} {} ({}:{})",
            finding["priority"].as_u64().unwrap_or(3),
            word(finding, "title"),
            word(at, "path"),
            at["start_line"]
        ));
    }
    if findings.len() > 5 {
        line.push_str(&format!("\n    … and {} more", findings.len() - 5));
    }
    line
}

/// `field` of `value` as one escaped line (`?` when absent).
fn word(value: &Value, field: &str) -> String {
    match &value[field] {
        Value::String(text) => text::one_line(text),
        Value::Null => "?".into(),
        other => text::one_line(&other.to_string()),
    }
}

/// A decision on an approval, in words.
fn approval_line(payload: &Value) -> String {
    let decision = match payload["decision"].as_str() {
        Some("approve") => "approved",
        Some("reject") => "rejected",
        _ => "decided",
    };
    format!(
        "approval {} {decision} by {} for {}",
        word(payload, "approval"),
        word(payload, "by"),
        word(payload, "hash")
    )
}

/// A side effect about to start (a push, a pull request), in words.
fn intent_line(payload: &Value) -> String {
    if let Some(push) = payload.get("push") {
        let onto = match push["onto"].as_str() {
            Some(onto) => format!(" (onto {})", text::short_commit(onto)),
            None => String::new(),
        };
        return format!(
            "publishing: pushing {} to branch {} of {}{onto}",
            text::short_commit(push["commit"].as_str().unwrap_or("?")),
            word(push, "branch"),
            word(push, "remote")
        );
    }
    if let Some(pr) = payload.get("open_pr") {
        return format!(
            "publishing: opening a pull request on {} from {} into {}",
            word(pr, "repo"),
            word(pr, "head"),
            word(pr, "base")
        );
    }
    format!("side effect starting: {}", preview_value(payload))
}

/// What a side effect did, in words.
fn outcome_line(payload: &Value) -> String {
    let again = |step: &Value| {
        if step["already_there"] == true {
            " (it was already there: an earlier attempt had done it)"
        } else {
            ""
        }
    };
    if let Some(push) = payload.get("push") {
        if push.get("failed").is_some() {
            return format!("  ✗ the push failed: {}", word(push, "failed"));
        }
        return format!(
            "  ✓ pushed {} to branch {}{}",
            text::short_commit(push["commit"].as_str().unwrap_or("?")),
            word(push, "branch"),
            again(push)
        );
    }
    if let Some(pr) = payload.get("open_pr") {
        if pr.get("failed").is_some() {
            return format!(
                "  ✗ opening the pull request failed: {}",
                word(pr, "failed")
            );
        }
        return format!(
            "  ✓ pull request #{} open: {}{}",
            word(pr, "number"),
            word(pr, "url"),
            again(pr)
        );
    }
    format!("side effect done: {}", preview_value(payload))
}

/// When a record was written, in milliseconds since the epoch.
fn at_ms(record: &Value) -> Option<u64> {
    record["at_ms"].as_u64().or_else(|| {
        let at = warden_time::parse_rfc3339(record["at"].as_str()?).ok()?;
        u64::try_from(at).ok()
    })
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn first_line(text: &str) -> String {
    let lines = text.lines().count();
    let first = text.lines().next().unwrap_or_default();
    if lines > 1 {
        format!("{} (+{} lines)", preview(first), lines - 1)
    } else {
        preview(first)
    }
}

fn preview(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(PREVIEW) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

fn preview_value(value: &Value) -> String {
    match value.as_str() {
        Some(text) => preview(text),
        None => preview(&value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(at: u64, kind: &str, payload: Value) -> Value {
        json!({"seq": 0, "at_ms": at, "kind": kind, "payload": payload})
    }

    #[test]
    fn a_run_reads_as_a_timeline_with_durations_rejections_and_spend() {
        let records = vec![
            record(
                1_000,
                "run_started",
                json!({"model": "openai:gpt", "context": {"manifest": [{"repo": "api", "commit": "0123456789abcdef0123"}]}}),
            ),
            record(1_010, "model_requested", json!({"turn": 1, "messages": 2})),
            record(
                1_500,
                "model_decision",
                json!({"model": "gpt", "text": "Let me look.\n\u{1b}[2J", "tool_calls": [{"name": "search"}, {"name": "nope"}], "usage": {"input_tokens": 120, "output_tokens": 30}, "cost": {"cost": "known", "micro_usd": 1500}}),
            ),
            record(
                1_501,
                "policy_verdict",
                json!({"call_id": "c1", "tool": "search", "verdict": {"allow": true}}),
            ),
            record(
                1_743,
                "tool_observation",
                json!({"call_id": "c1", "tool": "search", "output": {"ok": "src/a.rs:3:retry\nsrc/b.rs:9:retry"}}),
            ),
            record(
                1_744,
                "arguments_rejected",
                json!({"call_id": "c2", "tool": "nope", "errors": ["unknown tool \"nope\""]}),
            ),
            record(
                2_000,
                "run_finished",
                json!({"outcome": {"failure": {"code": "invalid_tool_calls", "message": "too many"}}, "usage": {"model_calls": 1, "tool_calls": 2, "input_tokens": 120, "output_tokens": 30, "cost_usd": 0.0015}}),
            ),
        ];
        let timeline = render(&records);
        let expected = "   0.000s  run started · model openai:gpt · api@0123456789ab
   0.010s  turn 1: asking the model
   0.500s    model gpt → search, nope · 120 in / 30 out tokens · $0.0015
              says: Let me look.
            \\u{1b}[2J
   0.743s      → search (242 ms): src/a.rs:3:retry (+1 lines)
   0.744s      ✗ nope call rejected: unknown tool \"nope\"
   1.000s  run finished: failed: invalid_tool_calls — too many · 1 model call · 2 tool calls · 120 in / 30 out tokens · $0.0015
";
        assert_eq!(timeline, expected, "\n{timeline}");
    }

    #[test]
    fn gates_and_reviews_read_in_words() {
        let records = vec![
            record(
                0,
                "gate_decided",
                json!({"stage": "request", "level": "high", "action": "approve_before_run",
                    "reasons": [{"level": "high", "rule": "ci", "detail": "the request names .github/workflows"}],
                    "request_hash": "sha256:ab", "approval": {"id": "apr_1"}, "proposal": null}),
            ),
            record(
                10,
                "review",
                json!({"round": 1, "verdict": "sent_back", "correct": false, "explanation": "x",
                    "findings": [
                        {"title": "nit", "body": "b", "priority": 3, "confidence": 0.9,
                         "location": {"repo": "r", "commit": "c", "path": "a.rs", "start_line": 4, "end_line": 4}},
                        {"title": "deletes the retry test", "body": "b", "priority": 1, "confidence": 0.9,
                         "location": {"repo": "r", "commit": "c", "path": "tests/retry.rs", "start_line": 1, "end_line": 9}}
                    ],
                    "proposal": {"commit": "c", "hash": "h"}}),
            ),
            record(
                20,
                "gate_decided",
                json!({"stage": "proposal", "level": "low", "action": "run", "reasons": [],
                    "request_hash": "sha256:ab", "approval": null,
                    "proposal": {"level": "medium", "action": "require_approval",
                        "reasons": [{"level": "medium", "rule": "dependencies", "detail": "Cargo.lock"}]}}),
            ),
        ];
        let timeline = render(&records);
        let expected = "   0.000s  ◆ risk gate (request): high → approve_before_run
                high ci: the request names .github/workflows
                waits for approval apr_1
   0.010s  ◆ review 1: sent_back · 2 findings
                P1 deletes the retry test (tests/retry.rs:1)
                P3 nit (a.rs:4)
   0.020s  ◆ risk gate (proposal): medium → require_approval
                medium dependencies: Cargo.lock
";
        assert_eq!(timeline, expected, "\n{timeline}");
    }

    #[test]
    fn a_publication_reads_in_words() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let records = vec![
            record(
                0,
                "approval_decided",
                json!({"approval": "apr_1", "decision": "approve", "hash": "sha256:ab", "by": "root"}),
            ),
            record(
                10,
                "side_effect_intent",
                json!({"push": {"remote": "https://github.com/acme/w.git", "branch": "warden/t", "commit": commit, "onto": null}}),
            ),
            record(
                20,
                "side_effect_outcome",
                json!({"push": {"branch": "warden/t", "commit": commit, "already_there": true}}),
            ),
            record(
                30,
                "side_effect_intent",
                json!({"open_pr": {"repo": "acme/w", "head": "warden/t", "base": "main", "commit": commit}}),
            ),
            record(
                40,
                "side_effect_outcome",
                json!({"open_pr": {"failed": "github answered 422\u{1b}[2J"}}),
            ),
        ];
        let timeline = render(&records);
        let expected = "   0.000s  approval apr_1 approved by root for sha256:ab
   0.010s  publishing: pushing 0123456789ab to branch warden/t of https://github.com/acme/w.git
   0.020s    ✓ pushed 0123456789ab to branch warden/t (it was already there: an earlier attempt had done it)
   0.030s  publishing: opening a pull request on acme/w from warden/t into main
   0.040s    ✗ opening the pull request failed: github answered 422\\u{1b}[2J
";
        assert_eq!(timeline, expected, "\n{timeline}");
    }
}
