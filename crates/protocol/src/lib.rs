//! Wire types shared by every part of Warden: task ids, kinds and statuses, the result JSON of
//! SPEC §5, the events a run emits, failure codes and usage. No logic beyond (de)serialisation and
//! small invariants of the types themselves.

#![warn(unreachable_pub)]
#[cfg(feature = "views")]
pub mod views;

use serde::{Deserialize, Serialize};
use std::fmt;

/// A task id: `tsk_` followed by 26 characters of a ULID (Crockford base32, time-sortable).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    pub const PREFIX: &'static str = "tsk_";

    /// Builds an id from the 26-character ULID part.
    pub fn from_ulid(ulid: &str) -> Result<TaskId, InvalidTaskId> {
        TaskId::try_from(format!("{}{ulid}", TaskId::PREFIX))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The string given is not `tsk_` followed by 26 Crockford base32 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTaskId(pub String);

impl fmt::Display for InvalidTaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid task id {:?}: expected `tsk_` followed by 26 base32 characters",
            self.0
        )
    }
}

impl std::error::Error for InvalidTaskId {}

impl TryFrom<String> for TaskId {
    type Error = InvalidTaskId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        let valid = value.strip_prefix(TaskId::PREFIX).is_some_and(|rest| {
            rest.len() == 26
                && rest.bytes().all(|b| {
                    b.is_ascii_digit()
                        || (b.is_ascii_uppercase() && !matches!(b, b'I' | b'L' | b'O' | b'U'))
                })
        });
        if valid {
            Ok(TaskId(value))
        } else {
            Err(InvalidTaskId(value))
        }
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TaskId {
    type Err = InvalidTaskId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::try_from(s.to_string())
    }
}

/// What a task asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    Question,
    Change,
    Maintain,
}

/// Task lifecycle (SPEC §6). The last four are terminal and immutable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    WaitingApproval,
    Running,
    Testing,
    WaitingInput,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        match self {
            TaskStatus::Completed
            | TaskStatus::Failed
            | TaskStatus::Cancelled
            | TaskStatus::TimedOut => true,
            TaskStatus::Queued
            | TaskStatus::WaitingApproval
            | TaskStatus::Running
            | TaskStatus::Testing
            | TaskStatus::WaitingInput => false,
        }
    }
}

/// Stable failure codes carried in `failure.code` and in API errors about tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// A token, cost, turn or wall-time budget would be exceeded by the next model call.
    BudgetExceeded,
    /// The model provider failed permanently or kept failing after retries and fallback.
    ModelError,
    /// The requested isolation could not be established.
    SandboxError,
    /// The agent's final submission was rejected too many times.
    InvalidSubmission,
    /// The task's wall-clock limit ran out.
    TimedOut,
    /// Someone cancelled the task.
    Cancelled,
    /// Warden itself failed (storage, git, I/O).
    Infrastructure,
    /// The repository could not be pinned or materialized safely.
    RepositoryError,
    /// The agent stopped without using a final tool too many times.
    NoSubmission,
    /// A policy decision ended the task.
    PolicyAbort,
    /// The task's runs were interrupted (worker crash, lost lease) too many times.
    Abandoned,
    /// A change's checks kept failing on its candidate tree after the last allowed submission.
    ChecksFailed,
    /// The checks already fail on the base commit, before the agent changed anything.
    BaselineFailing,
    /// The agent's tool calls were rejected (unknown tool, invalid arguments, denied by policy)
    /// too many times in a row.
    InvalidToolCalls,
    /// A disk budget was exceeded: a snapshot larger than `[storage] snapshot_max_mib` /
    /// `snapshot_max_files`. A command (or a tool) that fills the view's writable space
    /// (`[sandbox] disk_mib` / `disk_inodes`) only meets `ENOSPC`: a tool observation, not a
    /// failure.
    QuotaExceeded,
    /// `maintain`: the repository is outside what maintenance handles (no lockfile, vendored
    /// sources, `[patch]`/`[replace]`, submodules); the message names the reason.
    UnsupportedProject,
    /// `maintain`: the checks could not say whether the base commit passes (a check timed out
    /// or was killed), so there is nothing to prove an upgrade against.
    BaselineInconclusive,
    /// `maintain`: an upgrade could not be applied (the package manager refused it, or its
    /// packages could not be fetched); the message names the upgrade.
    UpgradeFailed,
    /// The reviewer's blocking (P0/P1) findings stood after the last allowed round: no
    /// proposal is offered; `review` in the result holds them.
    ReviewBlocked,
    /// An approval the task needed before it could run (the risk gate's
    /// `approve_before_run`) was rejected: nothing ran.
    Rejected,
    /// The conversation outgrew the model's context window (`[model] context_tokens`) and three
    /// compactions did not bring it back under the trigger.
    ContextExhausted,
}

impl FailureCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::BudgetExceeded => "budget_exceeded",
            FailureCode::ModelError => "model_error",
            FailureCode::SandboxError => "sandbox_error",
            FailureCode::InvalidSubmission => "invalid_submission",
            FailureCode::TimedOut => "timed_out",
            FailureCode::Cancelled => "cancelled",
            FailureCode::Infrastructure => "infrastructure",
            FailureCode::RepositoryError => "repository_error",
            FailureCode::NoSubmission => "no_submission",
            FailureCode::PolicyAbort => "policy_abort",
            FailureCode::Abandoned => "abandoned",
            FailureCode::ChecksFailed => "checks_failed",
            FailureCode::BaselineFailing => "baseline_failing",
            FailureCode::InvalidToolCalls => "invalid_tool_calls",
            FailureCode::QuotaExceeded => "quota_exceeded",
            FailureCode::UnsupportedProject => "unsupported_project",
            FailureCode::BaselineInconclusive => "baseline_inconclusive",
            FailureCode::UpgradeFailed => "upgrade_failed",
            FailureCode::Rejected => "rejected",
            FailureCode::ReviewBlocked => "review_blocked",
            FailureCode::ContextExhausted => "context_exhausted",
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `failure` in a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
}

/// Whether a claim was seen in the code or reasoned from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    Observed,
    Inferred,
}

/// One checked citation. `url` is built by Warden, never taken from the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub repo: String,
    pub commit: String,
    pub path: String,
    pub start_line: u64,
    pub end_line: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub text: String,
    pub basis: Basis,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub summary: String,
    pub claims: Vec<Claim>,
    #[serde(default)]
    pub not_established: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clarification {
    pub question: String,
}

/// Token and money usage of a task. `cost_usd` is `null` when any model call had no known price:
/// an unknown cost is never reported as zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Every prompt token, those read from and written to a prompt cache included.
    pub input_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic; present only when non-zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens spent reasoning (inside `output_tokens`; present only when non-zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// `cached_input_tokens / input_tokens`: the share of the prompt read from the cache,
    /// rounded to 4 places; absent before any prompt token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    pub cost_usd: Option<f64>,
    pub model_calls: u64,
    pub tool_calls: u64,
    /// Models whose price is not in the price table; present only when non-empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_models: Vec<String>,
    /// Model responses that carried no usage at all; present only when non-zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub responses_without_usage: u64,
    /// The part of this usage the explorers the agent sent (`explore`) spent, and how many it
    /// sent; present only when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explorers: Option<ExplorerUsage>,
}

/// What a run's explorers spent (inside the run's [`Usage`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplorerUsage {
    /// Explorers sent.
    pub sent: u32,
    pub model_calls: u64,
    /// Every prompt token of their calls, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when a call had no known price.
    pub cost_usd: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Sets [`Usage::cache_hit_rate`] from the token counts.
    pub fn with_cache_hit_rate(mut self) -> Usage {
        self.cache_hit_rate = cache_hit_rate(self.cached_input_tokens, self.input_tokens);
        self
    }
}

/// `read / input` (input counting every prompt token, read and written ones included), rounded
/// to 4 places; `None` without prompt tokens.
pub fn cache_hit_rate(read: u64, input: u64) -> Option<f64> {
    (input > 0).then(|| ((read.min(input) as f64 / input as f64) * 10_000.0).round() / 10_000.0)
}

/// The outcome of a question task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum QuestionOutcome {
    Answer { answer: Answer },
    Clarification { clarification: Clarification },
    Failure { failure: Failure },
}

/// One pinned repository of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    pub repo: String,
    pub commit: String,
    pub root: String,
}

/// The result JSON of SPEC §5 for a question task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionResult {
    pub task_id: TaskId,
    pub kind: TaskKind,
    #[serde(flatten)]
    pub outcome: QuestionOutcome,
    pub usage: Usage,
    /// The model that produced the result (`faux` for the deterministic no-model runner).
    pub model: String,
    /// The sandbox backend tool commands ran in (`local` means no isolation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Human-readable caveats: an unpriced model, the faux runner, a no-isolation sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

impl QuestionResult {
    /// CLI exit code per SPEC §2.
    pub fn exit_code(&self) -> i32 {
        match self.outcome {
            QuestionOutcome::Answer { .. } => 0,
            QuestionOutcome::Failure { .. } => 1,
            QuestionOutcome::Clarification { .. } => 3,
        }
    }
}

/// One run of a check command on one exact tree (SPEC §5). A record proves something only about
/// `tree` under `config_hash` (the check list and sandbox backend): any later write to the
/// candidate makes a new tree and so needs a new record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validation {
    pub command: String,
    /// `None` when the command was killed (timeout, signal) before it exited.
    pub exit_code: Option<i32>,
    pub tree: String,
    pub config_hash: String,
    pub sandbox: String,
    pub duration_ms: u64,
    /// The last part of stdout and stderr, bounded and redacted.
    pub output_tail: String,
    /// This record was not run again: an earlier run of the same command on the same tree
    /// under the same `config_hash` and `sandbox` is what it reports (its duration and output
    /// are that run's). Absent when the check ran for this record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

impl Validation {
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// One file of a proposal's diff (from `git diff-tree --numstat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedFile {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub status: String,
    /// `None` for binary files.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// Totals over a proposal's files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffStat {
    pub files_changed: u64,
    pub additions: u64,
    pub deletions: u64,
}

/// The result of a change: a commit on top of the base commit in Warden's mirror, with the
/// validations that passed on exactly its tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// `prp_` followed by the task id's ULID part.
    pub id: String,
    pub repo: String,
    pub base_commit: String,
    pub commit: String,
    pub tree: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub diff_stat: DiffStat,
    pub files: Vec<ChangedFile>,
    pub summary: String,
    /// sha256 over the base commit, tree, commit and the validations' canonical JSON: what an
    /// approval binds to.
    pub hash: String,
    pub validations: Vec<Validation>,
    /// Changed paths that are sensitive (environment files, private keys, CI configuration,
    /// credential stores): publishing such a proposal needs a `publish_sensitive` approval.
    /// Derived from `files`, so the hash (which covers the tree) already binds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive_files: Vec<String>,
}

/// Whether and where a proposal was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationStatus {
    NotRequested,
    AwaitingApproval,
    Pushed,
    PrOpened,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publication {
    pub status: PublicationStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
}

/// A person's decision on a pending approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Reject,
}

/// Where an approval stands. `approved` and `rejected` are final: an approval is used once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
}

/// A human decision bound to the hash of exactly what it approves (SPEC §1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// `apr_` followed by the task id's ULID part.
    pub id: String,
    /// What is approved, e.g. `publish`.
    pub kind: String,
    /// The hash of the subject (for `publish`, the proposal hash).
    pub subject_hash: String,
    pub status: ApprovalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
}

/// The outcome of a change task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ChangeOutcome {
    Proposal {
        proposal: Box<Proposal>,
        publication: Publication,
    },
    /// The agent submitted a tree identical to the base: nothing to propose.
    NoChange {
        summary: String,
    },
    Clarification {
        clarification: Clarification,
    },
    Failure {
        failure: Failure,
    },
    /// The risk gate holds the task before it runs: it waits (`waiting_approval`) for the
    /// approval in `approval`, bound to the request's hash (`gate.request_hash`). Nothing ran.
    AwaitingApproval {},
}

/// A risk level of the gates (`[gates]`), lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateLevel {
    Low,
    Medium,
    High,
}

/// What the operator's `[gates]` policy does at a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateAction {
    /// Run at once.
    Run,
    /// Run at once; the proposal reaches a remote only through an approval bound to its hash.
    ApproveProposal,
    /// Wait for an approval bound to the request's hash before anything runs.
    ApproveBeforeRun,
}

/// One reason a gate classified a request or a proposal at a level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateReason {
    pub level: GateLevel,
    /// The rule: `ci`, `dependencies`, `secrets`, `auth`, `infrastructure`, `sensitive`,
    /// `checks`, `build`.
    pub rule: String,
    /// What matched, in words.
    pub detail: String,
}

/// The classification of the proposal's actual paths, after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateProposal {
    pub level: GateLevel,
    pub action: GateAction,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<GateReason>,
}

/// The risk gate's decision on a change task: `gate` in its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// The request's level: the highest of its reasons' (`low` without any).
    pub level: GateLevel,
    /// What the policy does at that level.
    pub action: GateAction,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<GateReason>,
    /// sha256 over the request (kind, prompt, repositories, checks, options): what an
    /// `approve_before_run` approval binds to.
    pub request_hash: String,
    /// The approval the task waited for before it ran (`approve_before_run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// The proposal's own paths classified after the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<GateProposal>,
}

/// Where a review finding points: a line range of a file of the reviewed commit, checked like
/// an answer's evidence (the file exists in that commit's tree, the lines exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingLocation {
    pub repo: String,
    /// The full commit id of the reviewed tree (the proposal commit, or `HEAD` of a range).
    pub commit: String,
    pub path: String,
    pub start_line: u64,
    pub end_line: u64,
}

/// One finding of the reviewer, in Codex's review format: P0 (must fix: breaks, data loss, a
/// security hole) to P3 (nit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewFinding {
    pub title: String,
    pub body: String,
    /// 0 (P0, most urgent) to 3 (P3).
    pub priority: u8,
    /// How sure the reviewer is, 0 to 1.
    pub confidence: f64,
    pub location: FindingLocation,
}

/// The reviewer's judgement of a change whose checks passed: `review` in its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Review {
    /// `pass` (nothing blocking), `sent_back` (blocking findings went back to the implementer;
    /// a later review decides), `blocked` (blocking findings stand: no proposal is offered), or
    /// `reported` (`[gates] review = "report"`: findings shown, nothing blocked).
    pub verdict: String,
    /// The reviewer's overall words.
    pub explanation: String,
    /// The last review's findings, most urgent first.
    pub findings: Vec<ReviewFinding>,
    /// How many reviews ran (each after a round of the implementer).
    pub rounds: u32,
    /// The reviewer's model.
    pub model: String,
    /// What the reviews cost (also counted in the task's `usage`).
    pub usage: Usage,
}

/// The result JSON of SPEC §5 for a change task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeResult {
    pub task_id: TaskId,
    pub kind: TaskKind,
    #[serde(flatten)]
    pub outcome: ChangeOutcome,
    /// Check runs on the base commit (`--baseline`), before the agent changed anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline: Vec<Validation>,
    /// The approval publication waits for (`--publish`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    pub usage: Usage,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// `maintain` tasks: the upgrades, the advisories they clear and the scans bound to trees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// The risk gate's decision (`[gates]`): the request's level, the action and the reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// The reviewer's findings and verdict (`[gates] review`), when a review ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
}

/// What a `maintain` task did beyond a change: `maintenance` in its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintenance {
    /// `cargo`.
    pub ecosystem: String,
    /// `baseline` (deterministic, no model).
    pub mode: String,
    /// What was asked for: `all`, `vulnerable`, or package names.
    pub select: Vec<String>,
    /// The upgrades applied in the candidate, in order.
    pub upgrades: Vec<Upgrade>,
    /// Advisory ids the base tree's scan found and the candidate's post-scan no longer does.
    pub advisories_cleared: Vec<String>,
    /// The vulnerability scans, each bound to the tree it read (`base`, then `candidate`).
    pub scans: Vec<Scan>,
}

/// One dependency upgrade of a `maintain` task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upgrade {
    pub package: String,
    pub from: String,
    pub to: String,
    /// The advisories this upgrade targets (empty for a plain update).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisories: Vec<String>,
}

/// A vulnerability scan of one exact tree's lockfile against an advisory database snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scan {
    /// `base` or `candidate`.
    pub stage: String,
    /// The git tree hash whose `Cargo.lock` was scanned.
    pub tree: String,
    /// The scanner and its version (`warden-rustsec/<version>`).
    pub scanner: String,
    /// The advisory database directory.
    pub database: String,
    /// `git:<commit>` when the database is a git checkout, else `sha256:<digest>` of its
    /// advisory files.
    pub database_snapshot: String,
    /// RFC 3339.
    pub scanned_at: String,
    pub findings: Vec<Finding>,
    /// What the scan could not evaluate, one line each (an advisory of one of the lockfile's
    /// packages whose ranges cannot be read in the ecosystem's version order): a scan with any
    /// is inconclusive for those packages, never clean.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unevaluated: Vec<String>,
}

/// One advisory that applies to a package version of a lockfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub advisory: String,
    pub package: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The advisory's `patched` requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patched: Vec<String>,
    /// Which copy of the package, when the lockfile can hold more than one of a name and
    /// version: npm's `packages` key (`node_modules/optimist/node_modules/minimist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl ChangeResult {
    /// CLI exit code per SPEC §2.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            ChangeOutcome::Proposal { publication, .. }
                if publication.status == PublicationStatus::AwaitingApproval =>
            {
                4
            }
            // The proposal stands; publishing it failed (approving again resumes it).
            ChangeOutcome::Proposal { publication, .. }
                if publication.status == PublicationStatus::Failed =>
            {
                1
            }
            ChangeOutcome::Proposal { .. } | ChangeOutcome::NoChange { .. } => 0,
            ChangeOutcome::Failure { .. } => 1,
            ChangeOutcome::Clarification { .. } => 3,
            ChangeOutcome::AwaitingApproval {} => 4,
        }
    }
}

/// One turn of a task's conversation, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptEntry {
    pub role: Role,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Agent,
}

/// What a run reports as it goes: shown live on stderr by the CLI, streamed over SSE by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    TaskStarted {
        task_id: TaskId,
        kind: TaskKind,
        model: String,
        manifest: Vec<ManifestEntry>,
    },
    ModelRequested {
        turn: u32,
        model: String,
    },
    ModelResponded {
        turn: u32,
        model: String,
        tool_calls: u32,
        input_tokens: u64,
        output_tokens: u64,
    },
    ModelRetrying {
        model: String,
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    ModelFallback {
        from: String,
        to: String,
        reason: String,
    },
    AgentMessage {
        text: String,
    },
    ToolStarted {
        call_id: String,
        tool: String,
        summary: String,
    },
    ToolFinished {
        call_id: String,
        tool: String,
        ok: bool,
        summary: String,
        /// What the person should know about the result (a program not found in the sandbox).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    PolicyDenied {
        tool: String,
        reason: String,
    },
    /// A tool call that did not run: an unknown tool or arguments that fail its schema. The
    /// model is told why and may try again (`consecutive` rejections in a row so far).
    ToolCallRejected {
        tool: String,
        reason: String,
        consecutive: u32,
    },
    SubmissionRejected {
        attempt: u32,
        errors: Vec<String>,
    },
    /// A connection of a change's `prepare` step through Warden's egress proxy: admitted, with
    /// what it moved, or refused, with why (`reason` also says how an admitted one failed).
    EgressConnection {
        /// `CONNECT`, `GET`, `HEAD`, or the refused method.
        method: String,
        host: String,
        port: u16,
        allowed: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        bytes_sent: u64,
        bytes_received: u64,
        duration_ms: u64,
    },
    StatusChanged {
        status: TaskStatus,
    },
    /// A check command of a change started on a candidate tree (`run_checks`, a submission's
    /// validation, the base tree's warm-up or baseline), in a view of its own.
    CheckStarted {
        command: String,
        tree: String,
    },
    /// That check ended: its exit code (`None`: killed, by its timeout or a cancellation), how
    /// long it ran, and the last lines of its output (redacted, at most 2,000 characters).
    /// `reused`: not run again, an earlier run of the same command on the same tree and
    /// configuration stands for it (no `check_started` came before).
    CheckFinished {
        command: String,
        tree: String,
        exit_code: Option<i32>,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reused: bool,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        output_tail: String,
    },
    /// A step of publishing an approved proposal, as it happens: `step` is `push` or
    /// `pull_request`, `state` `started`, `done` or `failed`; `detail` the branch, the pull
    /// request's address, or why it failed.
    PublicationStep {
        step: String,
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// The reviewer judged a change whose checks passed (`round` 1, 2, …): its verdict (`pass`,
    /// `sent_back`, `blocked`, `reported`), how many findings, how many of them blocking.
    ReviewFinished {
        round: u32,
        verdict: String,
        findings: u32,
        blocking: u32,
    },
    /// The risk gate classified the request (`stage` `request`, before the run) or the
    /// proposal's paths (`proposal`, after it): its level, the policy's action, the reasons,
    /// and the approval the task waits for when it must be approved before it runs.
    GateDecided {
        stage: String,
        level: GateLevel,
        action: GateAction,
        reasons: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<String>,
    },
    /// A message sent to the task while it waits to run or runs (`POST /v1/tasks/{id}/messages`,
    /// `warden say`): the agent reads it at its next turn. `seq` is its place in the task's
    /// conversation.
    MessageQueued {
        seq: u64,
        author: String,
        text: String,
    },
    /// Message `seq` reached the agent, before model call `turn`.
    MessageDelivered {
        seq: u64,
        turn: u32,
    },
    /// The conversation neared the model's context window and was compacted (`attempt` 1, 2, …
    /// in this run): its estimated size before and after, in tokens; `shrunk` is false when it
    /// stayed above the trigger (three such end the run with `context_exhausted`).
    ContextCompacted {
        attempt: u32,
        tokens_before: u64,
        tokens_after: u64,
        shrunk: bool,
    },
    TaskFinished {
        status: TaskStatus,
        outcome: String,
    },
    /// An event was withheld: with the registered secrets redacted it was no longer an event
    /// (a secret overlapped its fixed vocabulary, say its type or a status), so neither it nor
    /// any part of it was stored or streamed. Carries nothing of the event it replaces.
    RedactionFailed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_id_accepts_only_the_documented_shape() {
        assert!(TaskId::try_from("tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".to_string()).is_ok());
        for bad in [
            "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V",   // 25 chars
            "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9X", // 27 chars
            "tsk_01hzy8q6k9v2m3n4p5r6s7t8v9",  // lowercase
            "tsk_01HZY8Q6K9V2M3N4P5R6S7T8VI",  // I is not Crockford
            "job_01HZY8Q6K9V2M3N4P5R6S7T8V9",
            "tsk_../../etc/passwd000000000",
            "",
        ] {
            assert!(TaskId::try_from(bad.to_string()).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn question_result_serialises_to_the_spec_shape() {
        let result = QuestionResult {
            task_id: TaskId::from_ulid("01HZY8Q6K9V2M3N4P5R6S7T8V9").unwrap(),
            kind: TaskKind::Question,
            outcome: QuestionOutcome::Answer {
                answer: Answer {
                    summary: "s".into(),
                    claims: vec![Claim {
                        text: "t".into(),
                        basis: Basis::Observed,
                        evidence: vec![Evidence {
                            repo: "app".into(),
                            commit: "a".repeat(40),
                            path: "src/lib.rs".into(),
                            start_line: 1,
                            end_line: 2,
                            url: None,
                        }],
                    }],
                    not_established: vec![],
                },
            },
            usage: Usage::default(),
            model: "faux".into(),
            sandbox: None,
            notices: vec![],
        };
        let value = serde_json::to_value(&result).unwrap();
        assert_eq!(value["outcome"], "answer");
        assert_eq!(value["kind"], "question");
        assert_eq!(value["answer"]["claims"][0]["basis"], "observed");
        assert_eq!(value["answer"]["claims"][0]["evidence"][0]["start_line"], 1);
        assert!(value["usage"]["cost_usd"].is_null());
        let back: QuestionResult = serde_json::from_value(value).unwrap();
        assert_eq!(back, result);
    }

    #[test]
    fn quota_exceeded_is_a_named_failure_code() {
        let code = FailureCode::QuotaExceeded;
        assert_eq!(serde_json::to_value(code).unwrap(), "quota_exceeded");
        assert_eq!(code.as_str(), "quota_exceeded");
        assert_eq!(
            serde_json::from_str::<FailureCode>("\"quota_exceeded\"").unwrap(),
            code
        );
    }

    #[test]
    fn terminal_statuses_are_exactly_the_last_four() {
        let terminal: Vec<_> = [
            TaskStatus::Queued,
            TaskStatus::WaitingApproval,
            TaskStatus::Running,
            TaskStatus::Testing,
            TaskStatus::WaitingInput,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
            TaskStatus::TimedOut,
        ]
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
        assert_eq!(
            terminal,
            [
                TaskStatus::Completed,
                TaskStatus::Failed,
                TaskStatus::Cancelled,
                TaskStatus::TimedOut
            ]
        );
    }
}
