//! `warden ask`: its arguments and how a question's result reads on a terminal. The task
//! itself runs through the front door (`local_cli` in-process, `remote_cli` with a server).

use crate::text;
use warden_protocol::{QuestionOutcome, QuestionResult};

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// A repository: local path or git URL, optionally `@REV` (`PATH@worktree`: the work tree,
    /// uncommitted files included) (repeatable); with --server, the name of a repository
    /// registered on the server
    #[arg(long = "repo", value_name = "PATH|URL[@REV]")]
    pub repos: Vec<String>,
    /// Print the result as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Continue the conversation of an earlier task (its repositories and commits are reused
    /// unless --repo is given)
    #[arg(long, value_name = "TASK")]
    pub follow_up: Option<String>,
    /// The question
    pub question: String,
}

/// The progress line a settled question ends with.
pub fn finish_line(result: &QuestionResult) -> String {
    match &result.outcome {
        QuestionOutcome::Answer { answer } => {
            let citations: usize = answer.claims.iter().map(|c| c.evidence.len()).sum();
            format!(
                "answered with {} and {}",
                crate::text::count(answer.claims.len() as u64, "claim", "claims"),
                crate::text::count(citations as u64, "checked citation", "checked citations")
            )
        }
        QuestionOutcome::Clarification { .. } => "the agent needs a clarification".into(),
        QuestionOutcome::Failure { failure } => {
            format!("failed ({}): {}", failure.code, failure.message)
        }
    }
}

/// The human-readable form of a result for stdout. Everything that came from the model, the
/// repository or a provider is escaped and indented (`text`), so it cannot forge a citation line
/// or drive the terminal.
pub fn render_result(result: &QuestionResult) -> String {
    let mut out = String::new();
    match &result.outcome {
        QuestionOutcome::Answer { answer } => {
            out.push_str(&text::block(&answer.summary, ""));
            out.push('\n');
            for (index, claim) in answer.claims.iter().enumerate() {
                let basis = match claim.basis {
                    warden_protocol::Basis::Observed => "observed",
                    warden_protocol::Basis::Inferred => "inferred",
                };
                out.push_str(&format!(
                    "\n{}. [{basis}] {}\n",
                    index + 1,
                    text::block(&claim.text, "      ")
                ));
                for evidence in &claim.evidence {
                    out.push_str(&format!(
                        "   ✓ {}:{}:{} @ {}",
                        text::one_line(&evidence.repo),
                        text::one_line(&evidence.path),
                        text::line_range(evidence.start_line, evidence.end_line),
                        crate::text::short_commit(&evidence.commit)
                    ));
                    if let Some(url) = &evidence.url {
                        out.push_str(&format!("  {}", text::one_line(url)));
                    }
                    out.push('\n');
                }
            }
            if !answer.not_established.is_empty() {
                out.push_str("\nNot established:\n");
                for item in &answer.not_established {
                    out.push_str(&format!("- {}\n", text::block(item, "  ")));
                }
            }
        }
        QuestionOutcome::Clarification { clarification } => {
            out.push_str(&format!(
                "The agent needs a clarification:\n{}\n\nAnswer with: warden answer {} \"…\"\n",
                text::block(&clarification.question, "  "),
                result.task_id
            ));
        }
        QuestionOutcome::Failure { failure } => {
            out.push_str(&format!(
                "Task failed ({}): {}\n",
                failure.code,
                text::block(&failure.message, "  ")
            ));
        }
    }
    out.push_str(&text::result_footer(
        &result.task_id,
        &result.model,
        &result.usage,
        &result.notices,
    ));
    out
}
