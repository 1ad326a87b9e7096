//! One line per task event, as a person follows a task: `warden ask`'s stderr and the progress
//! notifications of `warden mcp` and `/mcp`. Events without a line (the task's own result,
//! status changes) give `None`.

use warden_protocol::Event;

/// The line `event` is shown as, if any.
pub fn render(event: &Event) -> Option<String> {
    Some(match event {
        Event::TaskStarted {
            task_id,
            model,
            manifest,
            ..
        } => {
            let repos: Vec<String> = manifest
                .iter()
                .map(|m| format!("{}@{}", m.repo, &m.commit[..m.commit.len().min(12)]))
                .collect();
            format!(
                "warden: task {task_id} · model {model} · {}",
                repos.join(", ")
            )
        }
        Event::ModelRequested { turn, .. } => format!("  · thinking (turn {turn})"),
        Event::ModelRetrying {
            model,
            attempt,
            delay_ms,
            reason,
        } => format!("  ! {model}: {reason}; retry {attempt} in {delay_ms} ms"),
        Event::ModelFallback { from, to, reason } => {
            format!("  ! {from} failed ({reason}); falling back to {to}")
        }
        Event::ToolStarted { summary, .. } => format!("  → {summary}"),
        Event::ToolFinished {
            ok: false,
            summary,
            note: Some(note),
            ..
        } => format!("    ✗ {summary} failed: {note}"),
        Event::ToolFinished {
            ok: false, summary, ..
        } => format!("    ✗ {summary} failed"),
        // A passing call with something to say (each check's verdict and duration).
        Event::ToolFinished {
            ok: true,
            summary,
            note: Some(note),
            ..
        } => format!("    ✓ {summary}: {note}"),
        Event::PolicyDenied { tool, reason } => format!("    ✗ {tool} denied: {reason}"),
        Event::ToolCallRejected {
            tool,
            reason,
            consecutive,
        } => format!("    ✗ {tool} call rejected ({consecutive} in a row): {reason}"),
        Event::SubmissionRejected { attempt, errors } => {
            format!(
                "    ✗ submission {attempt} rejected:\n- {}",
                errors.join("\n- ")
            )
        }
        Event::EgressConnection {
            method,
            host,
            port,
            allowed: false,
            reason,
            ..
        } => format!(
            "    ✗ egress refused: {method} {host}:{port}: {}",
            reason.as_deref().unwrap_or("refused")
        ),
        Event::EgressConnection {
            method,
            host,
            port,
            allowed: true,
            reason,
            bytes_received,
            duration_ms,
            ..
        } => {
            let moved = format!("{} in {duration_ms} ms", bytes(*bytes_received));
            match reason {
                Some(reason) => format!("  ! egress {method} {host}:{port} ({moved}): {reason}"),
                None => format!("  ⇄ egress {method} {host}:{port} ({moved})"),
            }
        }
        Event::GateDecided {
            stage,
            level,
            action,
            reasons,
            approval,
        } => {
            let level = warden_engine::gates::level_name(*level);
            let action = warden_engine::gates::action_name(*action);
            let mut line = format!("  ◆ risk gate ({stage}): {level} → {action}");
            for reason in reasons {
                line.push_str(&format!("\n      {reason}"));
            }
            if let Some(approval) = approval {
                line.push_str(&format!("\n      waits for approval {approval}"));
            }
            line
        }
        Event::ReviewFinished {
            round,
            verdict,
            findings,
            blocking,
        } => format!(
            "  ◆ review {round}: {verdict} ({findings} findings, {blocking} blocking)"
        ),
        Event::MessageQueued { seq, author, .. } => {
            format!("  ✉ message {seq} from {author} queued for the agent's next turn")
        }
        Event::MessageDelivered { seq, turn } => {
            format!("  ✉ message {seq} delivered to the agent (turn {turn})")
        }
        Event::ContextCompacted {
            attempt,
            tokens_before,
            tokens_after,
            shrunk,
        } => format!(
            "  ◆ context compacted ({attempt}): about {tokens_before} → {tokens_after} tokens{}",
            if *shrunk { "" } else { ", still above the trigger" }
        ),
        Event::RedactionFailed => {
            "  ! an event was withheld: redacting secrets from it failed".into()
        }
        Event::ModelResponded { .. }
        | Event::AgentMessage { .. }
        | Event::ToolFinished { ok: true, .. }
        | Event::StatusChanged { .. }
        // Checks and publication steps are the console's timeline for now: the command line's
        // progress shows a check through its tool call and publication in its result (how it
        // shows them live is the command line's half of issue 30).
        | Event::CheckStarted { .. }
        | Event::CheckFinished { .. }
        | Event::PublicationStep { .. }
        // The command prints the settled task's finish line from its result.
        | Event::TaskFinished { .. } => return None,
    })
}

/// A byte count as people read it.
fn bytes(count: u64) -> String {
    match count {
        0..1024 => format!("{count} B"),
        1024..1_048_576 => format!("{:.1} KiB", count as f64 / 1024.0),
        _ => format!("{:.1} MiB", count as f64 / 1_048_576.0),
    }
}
