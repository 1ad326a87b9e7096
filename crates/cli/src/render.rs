//! What the task commands print, the same for in-process tasks and a server's: a settled
//! task's result (human-readable or its JSON) with the exit code of SPEC §2, `show`, `tasks`
//! and a run's timeline. Everything is rendered from the task JSON of `GET /v1/tasks/{id}`,
//! which the in-process path builds with the same function the API uses.

use crate::{ask, run, text};
use serde_json::Value;
use warden_protocol::{ChangeResult, QuestionResult, TaskId, TaskKind, TaskStatus};

/// Prints a settled task's result like the in-process path and returns its exit code.
pub fn print_outcome(task: &Value, json: bool) -> anyhow::Result<u8> {
    let id = task_id_of(task)?;
    let status = status_of(task);
    let Some(result) = task.get("result").filter(|r| r.is_object()) else {
        // Settled without a result: cancelled while queued, or waiting before it started.
        if json {
            println!("{}", text::json_line(task));
        } else {
            println!(
                "Task {id} is {} without a result",
                text::one_line(task["status"].as_str().unwrap_or("unknown"))
            );
        }
        return Ok(match status {
            Some(TaskStatus::WaitingApproval) => 4,
            Some(TaskStatus::WaitingInput) => 3,
            _ => 1,
        });
    };
    if let Some(line) = finish_line(task, result) {
        eprintln!("warden: {}", text::block(&line, "      "));
    }
    if json {
        println!("{}", text::json_line(result));
    } else {
        print!("{}", render(task, result));
    }
    let code = exit_code(result);
    if code == 3 {
        eprintln!("warden: answer it with: warden answer {id} \"…\"");
    }
    Ok(code)
}

/// The progress line a settled task ends with (answered with how many citations, the
/// proposal and its checks, the failure), for a result this build understands.
pub fn finish_line(task: &Value, result: &Value) -> Option<String> {
    match serde_json::from_value::<TaskKind>(task["kind"].clone()).ok()? {
        TaskKind::Question => serde_json::from_value::<QuestionResult>(result.clone())
            .ok()
            .map(|r| ask::finish_line(&r)),
        TaskKind::Change => serde_json::from_value::<ChangeResult>(result.clone())
            .ok()
            .map(|r| run::finish_line(&r)),
        TaskKind::Maintain => serde_json::from_value::<ChangeResult>(result.clone())
            .ok()
            .map(|r| run::finish_line(&r)),
    }
}

/// The human-readable result with the in-process renderers; JSON (escaped) for a result this
/// build does not understand. The renderers escape model and repository text; the fields they
/// print as they are (ids, hashes, statuses) come from the server here, so the whole text gets
/// a last pass too.
pub fn render(task: &Value, result: &Value) -> String {
    let kind: Option<TaskKind> = serde_json::from_value(task["kind"].clone()).ok();
    let rendered = match kind {
        Some(TaskKind::Question) => serde_json::from_value::<QuestionResult>(result.clone())
            .ok()
            .map(|r| ask::render_result(&r)),
        Some(TaskKind::Change) => serde_json::from_value::<ChangeResult>(result.clone())
            .ok()
            .map(|r| run::render_change(&r)),
        Some(TaskKind::Maintain) => serde_json::from_value::<ChangeResult>(result.clone())
            .ok()
            .map(|r| crate::maintain::render(&r)),
        None => None,
    }
    .map(|rendered| text::lines(&rendered));
    rendered.unwrap_or_else(|| {
        let pretty = serde_json::to_string_pretty(result).unwrap_or_default();
        format!("{}\n", text::block(&pretty, ""))
    })
}

/// SPEC §2 from the result JSON (§5), as `QuestionResult::exit_code` and
/// `ChangeResult::exit_code` compute it.
pub fn exit_code(result: &Value) -> u8 {
    match result["outcome"].as_str() {
        Some("proposal") if result["publication"]["status"] == "awaiting_approval" => 4,
        Some("proposal") if result["publication"]["status"] == "failed" => 1,
        Some("answer" | "proposal" | "no_change") => 0,
        Some("clarification") => 3,
        // The risk gate holds a change until an approval lets it run.
        Some("awaiting_approval") => 4,
        _ => 1,
    }
}

/// A kind or status as the JSON, `warden tasks` and the documentation spell it
/// (`waiting_input`), escaped.
pub fn wire_name(value: &Value) -> String {
    text::one_line(value.as_str().unwrap_or("?"))
}

/// The task's status, if it is one this build knows.
pub fn status_of(task: &Value) -> Option<TaskStatus> {
    serde_json::from_value(task["status"].clone()).ok()
}

/// The task's id, checked.
pub fn task_id_of(task: &Value) -> anyhow::Result<TaskId> {
    crate::remote::task_id_of(task)
}

/// `warden show`: the task as JSON, or a summary line, its prompt and its result.
pub fn print_task(task: &Value, json: bool) -> anyhow::Result<u8> {
    if json {
        println!("{}", text::json_pretty(task)?);
        return Ok(0);
    }
    println!(
        "{} · {} · {} · {}",
        text::one_line(task["id"].as_str().unwrap_or("?")),
        wire_name(&task["kind"]),
        wire_name(&task["status"]),
        text::one_line(task["created_at"].as_str().unwrap_or_default())
    );
    println!(
        "prompt: {}",
        text::block(task["prompt"].as_str().unwrap_or_default(), "  ")
    );
    if let Some(result) = task.get("result").filter(|r| r.is_object()) {
        print!("{}", render(task, result));
    }
    Ok(0)
}

/// `warden say`: what became of the message sent to task `id`, whose status was `before`:
/// queued for the agent's next turn, taken as the answer, or the follow-up it started; or the
/// task it left as JSON.
pub fn print_said(
    id: &TaskId,
    before: Option<TaskStatus>,
    task: &Value,
    json: bool,
) -> anyhow::Result<u8> {
    if json {
        println!("{}", text::json_pretty(task)?);
        return Ok(0);
    }
    let next = task_id_of(task)?;
    if &next != id {
        println!(
            "{id} had ended; the message started the follow-up {next} (watch it with `warden logs {next} --follow`)"
        );
    } else if before == Some(TaskStatus::WaitingInput) {
        println!("{id} took the message as its answer and is queued again (watch it with `warden logs {id} --follow`)");
    } else {
        println!(
            "{id} ({}): the agent reads the message at its next turn",
            wire_name(&task["status"])
        );
    }
    Ok(0)
}

/// `warden tasks`: one line a task, or the tasks as JSON.
pub fn print_tasks(tasks: &[Value], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", text::json_pretty(tasks)?);
        return Ok(());
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for task in tasks {
        println!("{}", task_line(task, now_ms));
    }
    Ok(())
}

/// One task of `warden tasks`: id, status, kind, age, repositories, outcome, cost and the
/// prompt's first line (the id first, so `cut -d' ' -f1` takes it).
fn task_line(task: &Value, now_ms: u64) -> String {
    let field = |value: &Value| text::one_line(value.as_str().unwrap_or("?"));
    let age = task["created_at"]
        .as_str()
        .and_then(|at| warden_time::parse_rfc3339(at).ok())
        .and_then(|at| u64::try_from(at).ok())
        .map_or_else(|| "?".to_string(), |at| age(now_ms.saturating_sub(at)));
    let repos: Vec<String> = task["repos"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|repo| repo["name"].as_str().map(text::one_line))
        .collect();
    let result = &task["result"];
    let outcome = result["outcome"]
        .as_str()
        .map_or("-".into(), text::one_line);
    let cost = match &result["usage"]["cost_usd"] {
        Value::Number(cost) => format!("${:.2}", cost.as_f64().unwrap_or(0.0)),
        // A result without a price: its model is not in the price table.
        Value::Null if result.is_object() => "unpriced".into(),
        _ => "-".into(),
    };
    format!(
        "{}  {:<10} {:<11} {:>4}  {:<14} {:<14} {:>8}  {}",
        field(&task["id"]),
        field(&task["status"]),
        field(&task["kind"]),
        age,
        if repos.is_empty() {
            "-".into()
        } else {
            repos.join(",")
        },
        outcome,
        cost,
        text::one_line(
            task["prompt"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default()
        )
    )
}

/// `ms` as the largest whole unit: `42s`, `5m`, `3h`, `12d`.
fn age(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m", seconds / 60),
        3600..=86_399 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// A run's timeline, headed by the task and run.
pub fn print_run_timeline(id: &TaskId, run: Option<&Value>, records: &[Value]) {
    if let Some(run) = run {
        println!("{id} · run {}", text::json_line(run));
        print!("{}", crate::timeline::render(records));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_line_shows_age_repositories_outcome_and_cost() {
        let now = warden_time::parse_rfc3339("2026-12-04T03:00:00Z").unwrap() as u64;
        let task = json!({
            "id": "tsk_01", "status": "completed", "kind": "question",
            "created_at": "2026-12-04T00:00:00.000Z",
            "repos": [{"name": "app"}, {"name": "web"}],
            "result": {"outcome": "answer", "usage": {"cost_usd": 0.1234}},
            "prompt": "how does retry work?\nsecond line"
        });
        let line = task_line(&task, now);
        assert_eq!(
            line,
            "tsk_01  completed  question      3h  app,web        answer            $0.12  how \
             does retry work?"
        );
        let unpriced = json!({"id": "tsk_02", "status": "failed", "kind": "change",
            "created_at": "bad", "repos": [], "result": {"outcome": "failure", "usage": {}},
            "prompt": ""});
        assert_eq!(
            task_line(&unpriced, now),
            format!(
                "tsk_02  failed     change         ?  {:<14} {:<14} unpriced  ",
                "-", "failure"
            )
        );
        let queued = json!({"id": "tsk_03", "status": "queued", "kind": "change", "prompt": "x"});
        assert_eq!(
            task_line(&queued, now),
            format!(
                "tsk_03  queued     change         ?  {:<14} {:<14} {:>8}  x",
                "-", "-", "-"
            )
        );
        assert_eq!(
            [age(0), age(61_000), age(7_200_000), age(3 * 86_400_000)],
            ["0s", "1m", "2h", "3d"]
        );
    }
}
