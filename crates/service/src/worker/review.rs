//! The implementer and the reviewer of a change run (`[gates] review`): the agent loop runs;
//! when it ends with a proposal (its checks passed), the reviewer (`warden_engine::review`)
//! judges it over exactly the proposal's tree, the diff and the check records. What blocking
//! findings (P0/P1 at or above `review_confidence`) do is the policy's: `report` shows them,
//! `block` fails the task with `review_blocked` (no proposal offered), `send_back` gives them
//! to the implementer as its next input in the same task (its candidate view still holds its
//! change) at most `review_rounds` times, then blocks. Every call, the reviewer's included, goes
//! through the run's journal and ledger: it is journaled and counted in the task's budgets.
//!
//! Replay after a crash: the reviewer asks the run's replaying model, or (a separate `[roles]
//! reviewer`) its own model behind a replayer sharing the run's recording, so its journaled
//! decisions are replayed in order with the implementer's and neither is paid again.

use std::sync::Arc;

use serde_json::json;
use warden_engine::change::ChangeSession;
use warden_engine::change::{self, ChangeRun};
use warden_engine::gates_config::ReviewMode;
use warden_engine::review::{self, ReviewRun, ReviewSubject};
use warden_protocol::{
    Event, Failure, FailureCode, Review, ReviewFinding, Role, TranscriptEntry, Usage,
};
use warden_runtime::{
    CancelFlag, Clock, EventSink, Finish, Journal, Model, RecordKind, RunOutcome, RunReport,
    SystemClock, Tool,
};
use warden_store::Task;

use super::RunServices;
use crate::journal::ReplayModel;
use crate::journal::{StoreEvents, StoreJournal};
use crate::ledger::StoreLedger;

/// What the implementer and the reviewer of one change run share.
pub(super) struct Implement<'a> {
    pub services: &'a RunServices,
    pub model: &'a ReplayModel,
    pub task: &'a Task,
    pub repo: &'a warden_engine::question::TaskRepo,
    pub checks: &'a [String],
    pub earlier: &'a [TranscriptEntry],
    pub conversation: &'a [TranscriptEntry],
    pub journal: &'a mut StoreJournal,
    pub events: &'a StoreEvents,
    pub cancel: CancelFlag,
    pub ledger: &'a StoreLedger,
    pub inbox: &'a crate::inbox::StoreInbox,
    pub session: &'a Arc<ChangeSession>,
}

/// Runs the implementer, then (per `[gates] review`) the reviewer on its proposal, as many
/// rounds as the policy allows. The report's usage covers every call; the review, when one
/// ran, is the last one's findings with its verdict.
pub(super) async fn implement(
    input: Implement<'_>,
    tools: &[Arc<dyn Tool>],
) -> (RunReport, Option<Review>) {
    let Implement {
        services,
        model,
        task,
        repo,
        checks,
        earlier,
        conversation,
        journal,
        events,
        cancel,
        ledger,
        inbox,
        session,
    } = input;
    let config = &services.config;
    let mut conversation = conversation.to_vec();
    let once = Once {
        config,
        model,
        task,
        repo,
        checks,
        earlier,
        events,
        ledger,
        inbox,
        tools,
    };
    let mut report = once.run(&conversation, journal, cancel.clone()).await;
    let mode = config.gates.review;
    if mode == ReviewMode::Off {
        return (report, None);
    }
    let own_model = match review::reviewer_model(config) {
        None => None,
        Some(Ok(own)) => Some(model.alongside(own)),
        Some(Err(message)) => {
            report.outcome = RunOutcome::Failed(Failure {
                code: FailureCode::ModelError,
                message,
            });
            return (report, None);
        }
    };
    let reviewer: &dyn Model = match &own_model {
        Some(own) => own,
        None => model,
    };
    let mut review_usage = Usage {
        cost_usd: Some(0.0),
        ..Usage::default()
    };
    let mut earlier_findings: Vec<ReviewFinding> = Vec::new();
    let mut round = 0u32;
    loop {
        let RunOutcome::Finished(Finish::Change {
            summary,
            proposal: Some(proposal),
        }) = &report.outcome
        else {
            // No proposal (any more): nothing to review; an earlier round's findings stand.
            let review = (round > 0).then(|| Review {
                verdict: "sent_back".into(),
                explanation: String::new(),
                findings: earlier_findings.clone(),
                rounds: round,
                model: reviewer.name(),
                usage: review_usage.clone(),
            });
            return (report, review);
        };
        round += 1;
        let (summary, proposal) = (summary.clone(), proposal.clone());
        let material = {
            let session = Arc::clone(session);
            let git = session_git(services);
            let mirror = repo.pinned.mirror.clone();
            let redactor = services.redactor.clone();
            let task_id = task.id.to_string();
            let proposal = proposal.clone();
            tokio::task::spawn_blocking(move || {
                let root = session.tree_root(&proposal.tree)?;
                let diff = warden_engine::diff::redacted_proposal_diff(
                    &git, &mirror, &task_id, &proposal, &redactor,
                )?
                .map(|(diff, _)| diff)
                .ok_or_else(|| "the proposal is not in the mirror".to_string())?;
                Ok::<_, String>((root, diff))
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r)
        };
        let (root, diff) = match material {
            Ok(both) => both,
            Err(message) => {
                report.outcome = RunOutcome::Failed(Failure {
                    code: FailureCode::Infrastructure,
                    message: format!("cannot prepare the review: {message}"),
                });
                return (report, None);
            }
        };
        let reviewed = review::review(
            ReviewRun {
                config,
                model: reviewer,
                journal: &mut *journal,
                events,
                clock: &SystemClock,
                cancel: cancel.clone(),
                ledger: Some(ledger),
            },
            &ReviewSubject {
                repo: &proposal.repo,
                commit: &proposal.commit,
                tree_root: &root,
                browse: repo.pinned.browse.clone(),
                request: &task.prompt,
                diff: &diff,
                validations: &proposal.validations,
                earlier: &earlier_findings,
            },
        )
        .await;
        let reviewed = match reviewed {
            Ok(reviewed) => reviewed,
            Err((failure, usage)) => {
                // A budget spent or a model failing during review ends the task with that
                // failure: a proposal nobody could review is not offered.
                review::add_usage(&mut review_usage, &usage);
                review::add_usage(&mut report.usage, &usage);
                report.outcome = RunOutcome::Failed(failure);
                return (report, None);
            }
        };
        review::add_usage(&mut review_usage, &reviewed.usage);
        review::add_usage(&mut report.usage, &reviewed.usage);
        let blocking: Vec<ReviewFinding> = reviewed
            .findings
            .iter()
            .filter(|f| review::blocks(f, config.gates.review_confidence))
            .cloned()
            .collect();
        let verdict = match mode {
            _ if blocking.is_empty() => "pass",
            ReviewMode::Report => "reported",
            ReviewMode::SendBack if round <= config.gates.review_rounds => "sent_back",
            _ => "blocked",
        };
        events.emit(Event::ReviewFinished {
            round,
            verdict: verdict.into(),
            findings: reviewed.findings.len() as u32,
            blocking: blocking.len() as u32,
        });
        let _ = journal
            .append(
                SystemClock.now_ms(),
                RecordKind::Review,
                json!({
                    "round": round,
                    "verdict": verdict,
                    "correct": reviewed.correct,
                    "explanation": reviewed.explanation,
                    "findings": reviewed.findings,
                    "proposal": {"commit": proposal.commit, "hash": proposal.hash},
                }),
            )
            .await;
        let review = Review {
            verdict: verdict.into(),
            explanation: reviewed.explanation.clone(),
            findings: reviewed.findings.clone(),
            rounds: round,
            model: reviewer.name(),
            usage: review_usage.clone(),
        };
        match verdict {
            "sent_back" => {
                // The implementer goes on from its candidate with the findings as its input.
                conversation.push(TranscriptEntry {
                    role: Role::Agent,
                    text: summary,
                });
                conversation.push(TranscriptEntry {
                    role: Role::User,
                    text: review::findings_message(&blocking),
                });
                earlier_findings = blocking;
                let spent = report.usage.clone();
                report = once.run(&conversation, journal, cancel.clone()).await;
                let mut total = spent;
                review::add_usage(&mut total, &report.usage);
                report.usage = total;
            }
            "blocked" => {
                report.outcome = RunOutcome::Failed(Failure {
                    code: FailureCode::ReviewBlocked,
                    message: format!(
                        "the reviewer's blocking findings stand after {round} review(s): {}",
                        blocking
                            .iter()
                            .map(|f| format!("[P{}] {}", f.priority, f.title))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                });
                return (report, Some(review));
            }
            _ => return (report, Some(review)),
        }
    }
}

/// Warden's git helper, as the repository store has it.
fn session_git(services: &RunServices) -> warden_repo::Git {
    services.repos.git().clone()
}

/// What every round of the implementer shares.
struct Once<'a> {
    config: &'a warden_engine::config::Config,
    model: &'a dyn Model,
    task: &'a Task,
    repo: &'a warden_engine::question::TaskRepo,
    checks: &'a [String],
    earlier: &'a [TranscriptEntry],
    events: &'a StoreEvents,
    ledger: &'a StoreLedger,
    inbox: &'a crate::inbox::StoreInbox,
    tools: &'a [Arc<dyn Tool>],
}

impl Once<'_> {
    /// One run of the implementer's loop from `conversation` (what followed the request).
    async fn run(
        &self,
        conversation: &[TranscriptEntry],
        journal: &mut StoreJournal,
        cancel: CancelFlag,
    ) -> RunReport {
        change::run_change(
            ChangeRun {
                config: self.config,
                model: self.model,
                task_id: &self.task.id,
                repo: self.repo,
                checks: self.checks,
                earlier: self.earlier,
                request: &self.task.prompt,
                conversation,
                journal,
                events: self.events,
                clock: &SystemClock,
                cancel,
                ledger: Some(self.ledger),
                inbox: Some(self.inbox),
            },
            self.tools,
        )
        .await
    }
}
