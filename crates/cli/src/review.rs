//! `warden review`: the reviewer (`warden_engine::review`) alone on an existing change — a
//! commit range of a repository (`--repo R BASE..HEAD`, default `HEAD~1..HEAD`) or a change
//! task's proposal (`TASK`: in-process, or with `--server` the server's, fetched as a bundle
//! beside the user's clone) — printing its findings, each location checked
//! against the reviewed commit's tree as answer citations are. Not a task: the repository is
//! pinned as `warden ask --repo` pins it (a verified read-only snapshot of `HEAD`), the model
//! is asked under `[limits]`, and nothing is recorded.
//!
//! Exit codes: 0 nothing blocking, 1 blocking findings (P0/P1 at or above `[gates]
//! review_confidence`) or the reviewer failed, 2 a usage or configuration error.

use crate::text;
use serde::Serialize;
use warden_protocol::Review;

#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// The repository (local path or git URL) whose commit range is reviewed
    #[arg(long = "repo", value_name = "PATH|URL")]
    pub repo: Option<String>,
    /// Print the review as one JSON object
    #[arg(long)]
    pub json: bool,
    /// `BASE..HEAD` (with --repo; default HEAD~1..HEAD) or a change task id (its proposal)
    pub target: Option<String>,
}

/// What `warden review` reviewed, and the review.
#[derive(Debug, Serialize)]
pub struct ReviewReport {
    pub repo: String,
    pub base: String,
    pub head: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    pub review: Review,
}

impl ReviewReport {
    pub fn exit_code(&self) -> u8 {
        u8::from(self.review.verdict == "blocked")
    }
}

/// The report for a terminal.
pub fn render(report: &ReviewReport) -> String {
    format!(
        "Reviewed {} {}..{}\n{}",
        text::one_line(&report.repo),
        text::short_commit(&report.base),
        text::short_commit(&report.head),
        crate::run::render_review(&report.review)
    )
}
