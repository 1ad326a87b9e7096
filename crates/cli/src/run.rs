//! `warden run`: its arguments and how a change's result reads on a terminal. The task itself
//! runs through the front door (`local_cli` in-process, `remote_cli` with a server): the
//! repository pinned, a writable copy-on-write view over its snapshot, optionally the checks on
//! the base (`--baseline`), the agent, and a proposal commit in Warden's mirror (`no_change`, a
//! clarification or a failure otherwise). The user's checkout is only read.

use crate::text;
use warden_protocol::{
    ApprovalStatus, ChangeOutcome, ChangeResult, Publication, PublicationStatus,
};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The repository: local path or git URL, optionally `@REV` (`PATH@worktree`: the work
    /// tree, uncommitted files included); with --server, the name of a repository registered
    /// on the server
    #[arg(
        long = "repo",
        value_name = "PATH|URL[@REV]",
        required_unless_present = "follow_up"
    )]
    pub repo: Option<String>,
    /// Continue an earlier change task (answer its clarification, or ask for more): same
    /// repository, on its proposal when it made one (else the commit it used), same checks
    /// unless --check is given, the earlier conversation included
    #[arg(long, value_name = "TASK", conflicts_with = "repo")]
    pub follow_up: Option<String>,
    /// Print the result as one JSON object
    #[arg(long)]
    pub json: bool,
    /// A check command run with `bash -c` in the sandbox on the candidate tree (repeatable)
    #[arg(long = "check", value_name = "CMD")]
    pub checks: Vec<String>,
    /// Run the checks once on the base commit first; if they fail there, stop with
    /// `baseline_failing`
    #[arg(long)]
    pub baseline: bool,
    /// Publish the proposal to the repository's remote as branch `warden/<task-id>`, after an
    /// approval bound to the proposal hash (`warden approve`); the task waits (exit code 4).
    /// Refused at once when the repository has no remote to push to
    #[arg(long)]
    pub publish: bool,
    /// With a proposal, also fetch it into the (local) repository as branch `warden/<task-id>`
    /// (never touches the work tree, index or current branch)
    #[arg(long)]
    pub apply: bool,
    /// The change request
    pub request: String,
}

/// The progress line a settled change ends with.
pub fn finish_line(result: &ChangeResult) -> String {
    match &result.outcome {
        ChangeOutcome::Proposal { proposal, .. } => format!(
            "proposal {} ({}, +{} -{}), {}",
            crate::text::short_commit(&proposal.commit),
            crate::text::count(proposal.diff_stat.files_changed, "file", "files"),
            proposal.diff_stat.additions,
            proposal.diff_stat.deletions,
            match proposal.validations.len() {
                0 => "no checks".to_string(),
                1 => "1 check passed".to_string(),
                n => format!("{n} checks passed"),
            }
        ),
        ChangeOutcome::NoChange { .. } => "no change: the agent left the tree as it was".into(),
        ChangeOutcome::Clarification { .. } => "the agent needs a clarification".into(),
        ChangeOutcome::Failure { failure } => {
            format!("failed ({}): {}", failure.code, failure.message)
        }
        ChangeOutcome::AwaitingApproval {} => {
            "the risk gate holds the change: it runs once approved".into()
        }
    }
}

/// The reviewer's verdict and findings, most urgent first, each with its checked location.
pub fn render_review(review: &warden_protocol::Review) -> String {
    let mut out = format!(
        "Review: {} after {} ({}, {} findings)\n",
        text::one_line(&review.verdict),
        text::count(u64::from(review.rounds), "round", "rounds"),
        text::one_line(&review.model),
        review.findings.len()
    );
    if !review.explanation.is_empty() {
        out.push_str(&format!("  {}\n", text::block(&review.explanation, "  ")));
    }
    for finding in &review.findings {
        out.push_str(&format!(
            "  [P{}] {} — {}:{} (confidence {:.2})\n    {}\n",
            finding.priority,
            text::one_line(&finding.title),
            text::one_line(&finding.location.path),
            text::line_range(finding.location.start_line, finding.location.end_line),
            finding.confidence,
            text::block(&finding.body, "    ")
        ));
    }
    out
}

/// The risk gate's decision: the request's level and action, the reasons, the proposal's.
fn render_gate(gate: &warden_protocol::Gate) -> String {
    use warden_engine::gates::{action_name, level_name, reason_lines};
    let mut out = format!(
        "Risk gate: {} → {}\n",
        level_name(gate.level),
        action_name(gate.action)
    );
    for line in reason_lines(&gate.reasons) {
        out.push_str(&format!("  · {}\n", text::one_line(&line)));
    }
    if let Some(proposal) = &gate.proposal {
        out.push_str(&format!(
            "  proposal: {} → {}\n",
            level_name(proposal.level),
            action_name(proposal.action)
        ));
        for line in reason_lines(&proposal.reasons) {
            out.push_str(&format!("    · {}\n", text::one_line(&line)));
        }
    }
    out
}

/// The human-readable form of a change result. Model and repository text is escaped.
/// Where publication stands, once it was asked for: the branch pushed, the pull request.
fn render_publication(publication: &Publication) -> String {
    let branch = publication
        .branch
        .as_deref()
        .map(|b| format!(" branch {}", text::one_line(b)))
        .unwrap_or_default();
    let pull_request = publication
        .pr_url
        .as_deref()
        .map(|url| format!("; pull request {}", text::one_line(url)))
        .unwrap_or_default();
    match publication.status {
        PublicationStatus::NotRequested => String::new(),
        PublicationStatus::AwaitingApproval => {
            format!("Publication ({}) waits for an approval.\n", branch.trim())
        }
        PublicationStatus::Pushed => format!("Published:{branch} pushed{pull_request}\n"),
        PublicationStatus::PrOpened => format!("Published:{branch}{pull_request}\n"),
        PublicationStatus::Failed => {
            format!("Publication failed:{branch}{pull_request} (see the notices)\n")
        }
    }
}

pub fn render_change(result: &ChangeResult) -> String {
    let mut out = String::new();
    match &result.outcome {
        ChangeOutcome::Proposal {
            proposal,
            publication,
        } => {
            out.push_str(&text::block(&proposal.summary, ""));
            out.push_str(&format!(
                "\n\nProposal {} on {} @ {}\n  commit {}\n  ref    {}\n  hash   {}\n",
                proposal.id,
                text::one_line(&proposal.repo),
                crate::text::short_commit(&proposal.base_commit),
                proposal.commit,
                proposal.reference,
                proposal.hash
            ));
            for file in &proposal.files {
                let counts = match (file.additions, file.deletions) {
                    (Some(a), Some(d)) => format!("+{a} -{d}"),
                    _ => "binary".into(),
                };
                out.push_str(&format!(
                    "  {:<8} {} ({counts})\n",
                    file.status,
                    text::one_line(&file.path)
                ));
            }
            if !proposal.sensitive_files.is_empty() {
                out.push_str(
                    "  sensitive files (publishing needs a publish_sensitive approval):\n",
                );
                for path in &proposal.sensitive_files {
                    out.push_str(&format!("    ! {}\n", text::one_line(path)));
                }
            }
            for v in &proposal.validations {
                out.push_str(&format!(
                    "  ✓ {} ({} ms, {})\n",
                    text::one_line(&v.command),
                    v.duration_ms,
                    v.sandbox
                ));
            }
            out.push_str(&format!(
                "\nSee the diff with: warden diff {}\nGet it as a branch with: warden apply {}\n",
                result.task_id, result.task_id
            ));
            out.push_str(&render_publication(publication));
            if let Some(approval) = &result.approval {
                if approval.status == ApprovalStatus::Pending {
                    out.push_str(&format!(
                        "Publishing waits for your approval ({}) of exactly this proposal:\n  \
                         warden approve {} --hash {}\n",
                        approval.kind, approval.id, approval.subject_hash
                    ));
                }
            }
        }
        ChangeOutcome::NoChange { summary } => {
            out.push_str(&format!(
                "No change was needed:\n{}\n",
                text::block(summary, "  ")
            ));
        }
        ChangeOutcome::Clarification { clarification } => {
            out.push_str(&format!(
                "The agent needs a clarification:\n{}\n\nAnswer with: warden answer {} \"…\"\n",
                text::block(&clarification.question, "  "),
                result.task_id
            ));
        }
        ChangeOutcome::Failure { failure } => {
            out.push_str(&format!(
                "Task failed ({}): {}\n",
                failure.code,
                text::block(&failure.message, "  ")
            ));
        }
        ChangeOutcome::AwaitingApproval {} => {
            out.push_str("Nothing ran: the risk gate holds this change until it is approved.\n");
            if let Some(approval) = &result.approval {
                out.push_str(&format!(
                    "Running it waits for your approval ({}) of exactly this request:\n  \
                     warden approve {} --hash {}\n",
                    approval.kind, approval.id, approval.subject_hash
                ));
            }
        }
    }
    if let Some(gate) = &result.gate {
        out.push_str(&render_gate(gate));
    }
    if let Some(review) = &result.review {
        out.push_str(&render_review(review));
    }
    for v in result.baseline.iter().filter(|v| !v.passed()) {
        out.push_str(&format!(
            "baseline ✗ {} (exit {:?})\n{}\n",
            text::one_line(&v.command),
            v.exit_code,
            text::block(&v.output_tail, "    ")
        ));
    }
    out.push_str(&text::result_footer(
        &result.task_id,
        &result.model,
        &result.usage,
        &result.notices,
    ));
    out
}
