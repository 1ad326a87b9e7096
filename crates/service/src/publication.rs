//! The server's side of publication: the approval, the task and the store around the
//! store-free steps of [`crate::publish`].
//!
//! The task queue is the durable trigger: deciding a publish approval moves its task from
//! `waiting_approval` back to `queued` ([`requeue_decided`], re-done by workers with
//! [`requeue_decided_tasks`] after a crash in between), and the worker that claims it publishes
//! ([`approved_publication`], through [`publish_approved`]) or ends it with the rejection
//! ([`rejected_publication`]) instead of running the agent. A crash during publication
//! interrupts that run; the next run resumes it, each step reconciled with the remote.

use crate::config::GithubSettings;
use crate::github_client::web_host_of_api;
use crate::publish::{
    publish_proposal, publish_remote, resolve_target, verify_proposal, Onto, PublishFailure,
    PublishRequest,
};
use warden_engine::redact::Redactor;
use warden_protocol::{Event, Publication, PublicationStatus};
use warden_runtime::{BoxFuture, EventSink, Journal, JournalError, RecordKind};

use crate::outage::StoreCalls;

/// What the server's publication of an approved proposal needs: a store (a run's, which
/// retries through outages, or the store itself), the mirrors, the GitHub settings.
pub struct ServerPublish<'a, C: ?Sized = dyn warden_store::Store> {
    pub store: &'a C,
    pub repos: &'a warden_repo::RepoStore,
    pub settings: &'a GithubSettings,
    pub redactor: &'a Redactor,
}

impl<C: ?Sized> Clone for ServerPublish<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: ?Sized> Copy for ServerPublish<'_, C> {}

/// Why [`publish_approved`] did not publish.
#[derive(Debug, thiserror::Error)]
pub enum ApprovedPublishError {
    /// The approval, its task, its proposal or its repository is not what publication needs
    /// (unknown, not approved, not a publish approval, another hash, a changed proposal).
    /// Retrying cannot help.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] warden_store::StoreError),
    /// Publication started and stopped (see [`PublishFailure::pushed`]); calling again resumes.
    #[error("{}", .0.error)]
    Publish(PublishFailure),
}

/// Publishes the proposal a `publish` approval approved, for a server change task: checks that
/// the approval is approved (or consumed: resuming after a crash) and bound to the task's
/// proposal hash, that the proposal in the mirror still hashes to it, consumes the approval
/// (an approval authorises one publication), then runs [`publish_proposal`] against the
/// registered repository's remote (a URL, or a local repository's `origin`). Returns the task's
/// change result with the publication filled in; recording it (and the task's status) is the
/// caller's. Safe to call again after a crash at any point.
pub async fn publish_approved<C: StoreCalls + ?Sized>(
    context: ServerPublish<'_, C>,
    approval_id: &str,
    journal: &mut dyn Journal,
) -> Result<warden_protocol::ChangeResult, ApprovedPublishError> {
    use warden_store::ApprovalStatus;
    let refused = |message: String| ApprovedPublishError::Refused(message);
    let approval = context
        .store
        .call("reading the approval", |store| {
            store.get_approval(approval_id)
        })
        .await?
        .ok_or_else(|| refused(format!("no approval {approval_id}")))?;
    if !matches!(approval.kind.as_str(), "publish" | "publish_sensitive") {
        return Err(refused(format!(
            "approval {approval_id} is a {} approval, not a publication",
            approval.kind
        )));
    }
    if !matches!(
        approval.status,
        ApprovalStatus::Approved | ApprovalStatus::Consumed
    ) {
        return Err(refused(format!(
            "approval {approval_id} is {}, not approved",
            approval.status.as_str()
        )));
    }
    let task = context
        .store
        .call("reading the task", |store| store.get_task(&approval.task))
        .await?
        .ok_or_else(|| refused(format!("no task {}", approval.task)))?;
    let mut result: warden_protocol::ChangeResult = task
        .result
        .clone()
        .and_then(|value| serde_json::from_value(value).ok())
        .ok_or_else(|| refused(format!("task {} has no change result", task.id)))?;
    let proposal = match &result.outcome {
        warden_protocol::ChangeOutcome::Proposal { proposal, .. } => proposal.as_ref().clone(),
        _ => return Err(refused(format!("task {} has no proposal", task.id))),
    };
    if proposal.hash != approval.subject_hash {
        return Err(refused(format!(
            "approval {approval_id} is bound to another hash than task {}'s proposal",
            task.id
        )));
    }
    // A follow-up published on the branch of the change it follows up: that change's
    // published commit must be the one this proposal builds on.
    let onto = match warden_engine::change::ChangeOptions::from_metadata(&task.metadata) {
        Ok(options) if options.same_branch => {
            Some(same_branch(context.store, &task, &proposal).await?)
        }
        _ => None,
    };
    // The repository as the task's runs pinned it: registered, or an in-process task's own
    // source; its mirror holds the proposal.
    let task_repo = crate::task_repos::proposal_repo(&task, &proposal);
    let spec = crate::task_repos::repo_specs(context.store, std::slice::from_ref(&task_repo))
        .await
        .map_err(|failure| refused(failure.message))?
        .pop()
        .ok_or_else(|| refused(format!("repository {}", proposal.repo)))?;
    let registered_branch = match &task_repo.source {
        Some(_) => None,
        None => context
            .store
            .call("reading the repository", |store| {
                store.get_repo(&proposal.repo)
            })
            .await?
            .and_then(|repository| repository.branch),
    };
    let mirror = context.repos.mirror_path(&spec);
    let git = context.repos.git().clone();
    let remote = publish_remote(&git, &spec.source).map_err(refused)?;
    let (check_git, check_mirror, check_proposal, task_text, hash) = (
        git.clone(),
        mirror.clone(),
        proposal.clone(),
        task.id.as_str().to_string(),
        approval.subject_hash.clone(),
    );
    tokio::task::spawn_blocking(move || {
        verify_proposal(
            &check_git,
            &check_mirror,
            &task_text,
            &check_proposal,
            &hash,
        )
    })
    .await
    .map_err(|e| refused(format!("verification task: {e}")))?
    .map_err(|now| {
        refused(format!(
            "the proposal changed since approval {approval_id} was given (now {now}); nothing \
             was published"
        ))
    })?;
    // The run's journal starts with the decision it acts on (who approved which hash, when).
    journal
        .append(
            warden_runtime::Clock::now_ms(&warden_runtime::SystemClock),
            warden_runtime::RecordKind::ApprovalDecided,
            serde_json::json!({
                "approval": approval.id,
                "decision": "approve",
                "hash": approval.subject_hash,
                "by": approval.decided_by,
                "decided_at": approval.decided_at_ms.map(warden_time::rfc3339),
            }),
        )
        .await
        .map_err(|error| refused(format!("cannot journal the decision: {error}")))?;
    if approval.status == ApprovalStatus::Approved {
        context
            .store
            .call("consuming the approval", |store| {
                store.consume_approval(approval_id, &approval.subject_hash)
            })
            .await?;
    }
    let mut target = resolve_target(context.settings, &proposal.repo, &remote, None);
    if let Some(target) = target.as_mut() {
        if target.base.is_none() {
            target.base = registered_branch.clone();
        }
    }
    let request = PublishRequest {
        git: &git,
        mirror: &mirror,
        remote: &remote,
        task_id: task.id.as_str(),
        proposal: &proposal,
        review: result.review.as_ref(),
        target: target.as_ref(),
        settings: context.settings,
        onto: onto.as_ref(),
    };
    let published = publish_proposal(request, journal, context.redactor, &mut |_| Ok(()))
        .await
        .map_err(ApprovedPublishError::Publish)?;
    if let warden_protocol::ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
        *publication = published.publication.clone();
    }
    if target.is_none() {
        result.notices.push(format!(
            "no GitHub repository for {} (its remote is not on {}): the branch is pushed and no \
             pull request was opened; name one with [[publish]] in warden.toml (or `warden \
             approve --github OWNER/NAME`)",
            proposal.repo,
            web_host_of_api(&context.settings.api_url).unwrap_or_else(|| "GitHub".into())
        ));
    }
    let branch = published.publication.branch.clone().unwrap_or_default();
    if let Some(onto) = &onto {
        result.notices.push(format!(
            "published as a new commit on {branch} (on top of {}, the change it follows up); \
             its pull request is that change's",
            &onto.parent[..onto.parent.len().min(12)]
        ));
    }
    // What an interrupted publication had done already is said, not done again.
    if published.push == warden_repo::proposal::PushOutcome::AlreadyThere {
        result.notices.push(format!(
            "the branch {branch} was already on the remote (it was already there from an \
             interrupted publication); it was not pushed again"
        ));
    }
    if onto.is_none()
        && published
            .pull
            .as_ref()
            .is_some_and(|pull| pull.already_there)
    {
        result.notices.push(
            "the pull request was already open (it was already there from an interrupted \
             publication); no second one was opened"
                .into(),
        );
    }
    if let Some(recorded) = result.approval.as_mut() {
        if recorded.id == approval.id {
            recorded.status = warden_protocol::ApprovalStatus::Approved;
            recorded.decided_by = approval.decided_by.clone();
            recorded.decided_at = approval.decided_at_ms.map(warden_time::rfc3339);
        }
    }
    Ok(result)
}

/// The branch a change task's proposal was published to (`pushed` or `pr_opened`) and the
/// proposal's commit the branch then held, from the task's `result`.
pub fn published_branch(result: Option<&serde_json::Value>) -> Option<(String, String)> {
    let result: warden_protocol::ChangeResult = serde_json::from_value(result?.clone()).ok()?;
    match result.outcome {
        warden_protocol::ChangeOutcome::Proposal {
            proposal,
            publication,
        } if matches!(
            publication.status,
            warden_protocol::PublicationStatus::Pushed
                | warden_protocol::PublicationStatus::PrOpened
        ) =>
        {
            Some((publication.branch?, proposal.commit))
        }
        _ => None,
    }
}

/// Where a `same_branch` follow-up publishes: the branch the change it follows up was
/// published to, which must hold that change's proposal commit, the parent of this one's.
async fn same_branch<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
    proposal: &warden_protocol::Proposal,
) -> Result<Onto, ApprovedPublishError> {
    let refused = |why: &str| {
        ApprovedPublishError::Refused(format!(
            "task {} publishes on the branch of the change it follows up, but {why}",
            task.id
        ))
    };
    let Some(earlier) = &task.follow_up_to else {
        return Err(refused("it follows up no task"));
    };
    let earlier = store
        .call("reading the followed task", |store| store.get_task(earlier))
        .await?
        .ok_or_else(|| refused("that task is gone"))?;
    let (branch, parent) = published_branch(earlier.result.as_ref())
        .ok_or_else(|| refused("that change published no branch"))?;
    if proposal.base_commit != parent {
        return Err(refused(&format!(
            "its proposal builds on {} rather than on {parent}, the branch's commit",
            proposal.base_commit
        )));
    }
    Ok(Onto { branch, parent })
}

/// A change task's result and the stored publish approval it records (the one its proposal
/// waits for, or was published under). `None`: no proposal, no approval, or one that is not a
/// publish approval of this task.
async fn recorded_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<(warden_protocol::ChangeResult, warden_store::Approval)>, warden_store::StoreError>
{
    let Some(result) = task
        .result
        .clone()
        .and_then(|value| serde_json::from_value::<warden_protocol::ChangeResult>(value).ok())
    else {
        return Ok(None);
    };
    if !matches!(
        result.outcome,
        warden_protocol::ChangeOutcome::Proposal { .. }
    ) {
        return Ok(None);
    }
    let Some(id) = result.approval.as_ref().map(|a| a.id.clone()) else {
        return Ok(None);
    };
    let approval = store
        .call("reading the publish approval", |store| {
            store.get_approval(&id)
        })
        .await?
        .filter(|a| {
            a.task == task.id && matches!(a.kind.as_str(), "publish" | "publish_sensitive")
        });
    Ok(approval.map(|approval| (result, approval)))
}

fn publication_status(result: &warden_protocol::ChangeResult) -> Option<PublicationStatus> {
    match &result.outcome {
        warden_protocol::ChangeOutcome::Proposal { publication, .. } => Some(publication.status),
        _ => None,
    }
}

/// The approval a claimed change task should be published under instead of running the agent
/// again: its result is a proposal whose publication is not finished (`awaiting_approval`,
/// `pushed` or `failed`) and its publish approval is approved (or consumed: a publication
/// interrupted earlier). For the worker that claims a task an approval re-queued.
pub async fn approved_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<warden_store::Approval>, warden_store::StoreError> {
    let Some((result, approval)) = recorded_publication(store, task).await? else {
        return Ok(None);
    };
    let unfinished = matches!(
        publication_status(&result),
        Some(
            PublicationStatus::AwaitingApproval
                | PublicationStatus::Pushed
                | PublicationStatus::Failed
        )
    );
    let approved = matches!(
        approval.status,
        warden_store::ApprovalStatus::Approved | warden_store::ApprovalStatus::Consumed
    );
    Ok((unfinished && approved).then_some(approval))
}

/// The final result of a claimed change task whose publish approval was rejected while it
/// waited: the proposal stays (in the result and in the mirror, for `warden apply`), its
/// publication is `not_requested` (nothing was pushed; SPEC §5 has no `rejected` publication)
/// and its approval shows the rejection. The task then ends `completed`, as `warden reject`
/// ends a local one. `None` when the task is not a rejected publication.
pub async fn rejected_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<warden_protocol::ChangeResult>, warden_store::StoreError> {
    let Some((mut result, approval)) = recorded_publication(store, task).await? else {
        return Ok(None);
    };
    if publication_status(&result) != Some(PublicationStatus::AwaitingApproval)
        || approval.status != warden_store::ApprovalStatus::Rejected
    {
        return Ok(None);
    }
    if let warden_protocol::ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
        *publication = Publication {
            status: PublicationStatus::NotRequested,
            branch: None,
            pr_url: None,
        };
    }
    if let Some(recorded) = result.approval.as_mut() {
        recorded.status = warden_protocol::ApprovalStatus::Rejected;
        recorded.decided_by = approval.decided_by.clone();
        recorded.decided_at = approval.decided_at_ms.map(warden_time::rfc3339);
    }
    Ok(Some(result))
}

/// Whether the result records a publication that failed.
pub fn publication_failed(result: &warden_protocol::ChangeResult) -> bool {
    matches!(
        &result.outcome,
        warden_protocol::ChangeOutcome::Proposal { publication, .. }
            if publication.status == warden_protocol::PublicationStatus::Failed
    )
}

/// Queues a task waiting on a publication whose approval was approved or consumed and whose
/// publication failed (a refused token, a remote that was down), so its next run resumes the
/// publication. `false` when the task is not such a task.
pub async fn requeue_failed_publication(
    store: &dyn warden_store::Store,
    task: &warden_protocol::TaskId,
) -> Result<bool, warden_store::StoreError> {
    requeue_waiting(store, task, |result, approval| {
        matches!(
            approval.status,
            warden_store::ApprovalStatus::Approved | warden_store::ApprovalStatus::Consumed
        ) && publication_failed(result)
    })
    .await
}

/// Queues a task that waits for a publish approval once that approval is decided (approved or
/// rejected): its next run publishes the proposal, or ends the task with the rejection, without
/// running the agent. The queue is the durable trigger: a decision recorded by a process that
/// died before queueing is found again by [`requeue_decided_tasks`]. `Ok(true)` when this call
/// queued it; a task in any other status (still running, cancelled, queued by someone else) is
/// left alone.
pub async fn requeue_decided(
    store: &dyn warden_store::Store,
    task: &warden_protocol::TaskId,
) -> Result<bool, warden_store::StoreError> {
    // A task waiting for its run approval (the risk gate) goes on the same way.
    if crate::gate::requeue_decided_run(store, task).await? {
        return Ok(true);
    }
    // Not undecided, nor a failed publication waiting for its cause to be fixed (approving
    // again resumes that: `TaskService::decide`).
    requeue_waiting(store, task, |result, approval| {
        approval.status != warden_store::ApprovalStatus::Pending && !publication_failed(result)
    })
    .await
}

/// Queues `task` again if it waits for its publish approval and `due` says its result and
/// approval call for a run; `false` when not (or when another process moved it first).
async fn requeue_waiting(
    store: &dyn warden_store::Store,
    task: &warden_protocol::TaskId,
    due: impl Fn(&warden_protocol::ChangeResult, &warden_store::Approval) -> bool,
) -> Result<bool, warden_store::StoreError> {
    use warden_protocol::TaskStatus;
    let Some(current) = store.get_task(task).await? else {
        return Ok(false);
    };
    if current.status != TaskStatus::WaitingApproval {
        return Ok(false);
    }
    let Some((result, approval)) = recorded_publication(store, &current).await? else {
        return Ok(false);
    };
    if !due(&result, &approval) {
        return Ok(false);
    }
    match store
        .transition(task, TaskStatus::WaitingApproval, TaskStatus::Queued, None)
        .await
    {
        Ok(_) => Ok(true),
        Err(warden_store::StoreError::StatusConflict { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// How many `waiting_approval` tasks one page of [`requeue_decided_tasks`] reads.
const WAITING_PAGE: u32 = 200;

/// [`requeue_decided`] for every task waiting for an approval: recovery from a crash between
/// recording a decision and queueing its task, and for a decision made while the run that asked
/// for it was still finishing. Workers call it periodically. Returns the tasks it queued.
pub async fn requeue_decided_tasks(
    store: &dyn warden_store::Store,
) -> Result<Vec<warden_protocol::TaskId>, warden_store::StoreError> {
    let mut queued = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_tasks(warden_store::TaskQuery {
                owner: None,
                status: Some(warden_protocol::TaskStatus::WaitingApproval),
                before: before.take(),
                limit: WAITING_PAGE,
            })
            .await?;
        for task in &page {
            if requeue_decided(store, &task.id).await? {
                queued.push(task.id.clone());
            }
        }
        match page.last() {
            Some(last) if page.len() == WAITING_PAGE as usize => before = Some(last.id.clone()),
            _ => return Ok(queued),
        }
    }
}

/// A run's journal during a publication that also puts each step on the task's timeline:
/// once a step's intent (`push`, `open_pr`) or outcome is journaled, a `publication_step`
/// event says so. The journal stays the record; the event only shows it.
pub struct ReportingJournal<'a> {
    pub journal: &'a mut (dyn Journal + 'a),
    pub events: &'a dyn EventSink,
}

impl Journal for ReportingJournal<'_> {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> BoxFuture<'_, Result<(), JournalError>> {
        let step = publication_step(kind, &payload);
        Box::pin(async move {
            self.journal.append(at_ms, kind, payload).await?;
            if let Some(step) = step {
                self.events.emit(step);
            }
            Ok(())
        })
    }
}

/// The `publication_step` event a journal record of a publication stands for, if any.
fn publication_step(kind: RecordKind, payload: &serde_json::Value) -> Option<Event> {
    let (step, body) = [("push", "push"), ("open_pr", "pull_request")]
        .into_iter()
        .find_map(|(key, step)| payload.get(key).map(|body| (step, body)))?;
    let text = |name: &str| body.get(name).and_then(|v| v.as_str()).map(str::to_string);
    let (state, detail) = match kind {
        RecordKind::SideEffectIntent => (
            "started",
            match step {
                "push" => text("branch").map(|b| format!("branch {b}")),
                _ => text("head").map(|h| format!("from branch {h}")),
            },
        ),
        RecordKind::SideEffectOutcome => match text("failed") {
            Some(why) => ("failed", Some(why)),
            None => {
                let there = body.get("already_there").and_then(|v| v.as_bool()) == Some(true);
                let what = match step {
                    "push" => text("branch").map(|b| format!("branch {b}")),
                    _ => text("url"),
                };
                (
                    "done",
                    what.map(|w| {
                        if there {
                            format!("{w} (already there)")
                        } else {
                            w
                        }
                    }),
                )
            }
        },
        _ => return None,
    };
    Some(Event::PublicationStep {
        step: step.to_string(),
        state: state.to_string(),
        detail,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_protocol::Event;
    use warden_runtime::RecordKind::{SideEffectIntent, SideEffectOutcome, ToolObservation};

    fn event(step: &str, state: &str, detail: Option<&str>) -> Option<Event> {
        Some(Event::PublicationStep {
            step: step.into(),
            state: state.into(),
            detail: detail.map(str::to_string),
        })
    }

    #[test]
    fn journaled_publication_steps_become_timeline_events() {
        let step = |kind, payload| super::publication_step(kind, &payload);
        assert_eq!(
            step(
                SideEffectIntent,
                json!({"push": {"branch": "warden/t", "commit": "c"}})
            ),
            event("push", "started", Some("branch warden/t"))
        );
        assert_eq!(
            step(
                SideEffectOutcome,
                json!({"push": {"branch": "warden/t", "already_there": true}})
            ),
            event("push", "done", Some("branch warden/t (already there)"))
        );
        assert_eq!(
            step(
                SideEffectIntent,
                json!({"open_pr": {"head": "warden/t", "base": "main"}})
            ),
            event("pull_request", "started", Some("from branch warden/t"))
        );
        assert_eq!(
            step(
                SideEffectOutcome,
                json!({"open_pr": {"url": "https://x/pull/1", "already_there": false}})
            ),
            event("pull_request", "done", Some("https://x/pull/1"))
        );
        assert_eq!(
            step(SideEffectOutcome, json!({"open_pr": {"failed": "401"}})),
            event("pull_request", "failed", Some("401"))
        );
        assert_eq!(step(ToolObservation, json!({"push": {}})), None);
        assert_eq!(step(SideEffectIntent, json!({"comment": {}})), None);
    }
}
