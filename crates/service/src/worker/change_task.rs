//! The change-task branch of a worker run: one registered repository pinned (at the commit an
//! earlier run recorded, or now, recording it), a writable copy-on-write view over its snapshot,
//! the change tools, and the loop with the store-backed journal, events and ledger. Checks are
//! the task's own (`checks` when it was submitted) or else the registered repository's. The
//! result is the change result of SPEC §5, the same JSON `warden run --json` prints; the
//! proposal commit lives under `refs/warden/proposals/<task>` in the mirror.
//!
//! With `publish`, a proposal ends the task in `waiting_approval`: a store approval bound to the
//! proposal hash is created first (`publish`, or `publish_sensitive` when the diff touches
//! sensitive files); nothing is pushed here.
//!
//! After a crash, a new run replays the model decisions the earlier run journaled, like a
//! question run does, but every tool call is executed again: the candidate tree is rebuilt from
//! scratch in a fresh view over the same pinned commit (edits are deterministic; a shell
//! command's output may differ from what the replayed decision saw). The proposal commit is
//! deterministic for the same tree; its hash covers the check records, which a new run makes
//! anew, so an approval an interrupted run created for another hash is rejected (by `warden`)
//! and a new one is created.

use std::sync::Arc;

use warden_protocol::{
    ChangeOutcome, ChangeResult, Event, Failure, FailureCode, Publication, PublicationStatus, Role,
    TaskKind, TaskStatus, TranscriptEntry, Usage, Validation,
};
use warden_runtime::{CancelFlag, EventSink, RunReport, SystemClock};
use warden_store::{Claim, RunJournal, StoreError, Task, TaskRepo, MESSAGE_AGENT, MESSAGE_USER};

use super::change_end::{change_failed, finished, infrastructure, request_publication};
use super::{
    repo_sandboxes, run_plumbing, setup_failure, Ending, RunPlumbing, RunServices, WorkerOptions,
};
use crate::journal::{store_events, StoreEvents, StoreJournal};
use crate::outage::{RunStore, StoreCalls};
use crate::publication;
use crate::task_repos::repo_specs;
use warden_engine::change::{self, ChangeOptions, ChangeSandbox, ChangeSetup};
use warden_engine::question;

/// Runs one claimed change task to its ending.
pub(super) async fn run_change_task(
    services: &RunServices,
    options: &WorkerOptions,
    claim: &Claim,
    cancel: CancelFlag,
) -> Ending {
    let task = &claim.task;
    let model_name = services.model.name();
    let store = &services.store;
    // Queued again by a decision on its publish approval: publish or end, no agent.
    if let Some(ending) = decided_publication(services, claim).await {
        return ending;
    }
    let change_options = match ChangeOptions::from_metadata(&task.metadata) {
        Ok(options) => options,
        Err(message) => return change_failed(task, &model_name, infrastructure(message)),
    };
    if task.repos.len() != 1 {
        return change_failed(
            task,
            &model_name,
            Failure {
                code: FailureCode::RepositoryError,
                message: format!(
                    "a change task works on exactly one repository, not {}",
                    task.repos.len()
                ),
            },
        );
    }
    let specs = match repo_specs(store, &task.repos).await {
        Ok(specs) => specs,
        Err(failure) => return change_failed(task, &model_name, failure),
    };
    let maintain_options = (task.kind == TaskKind::Maintain)
        .then(|| change_options.maintain.clone().unwrap_or_default());
    let checks = match change_options.checks.clone() {
        Some(checks) => checks,
        None => match store
            .call("reading the repository", |store| {
                store.get_repo(&task.repos[0].name)
            })
            .await
        {
            Ok(Some(registered)) => registered.checks,
            Ok(None) => {
                return change_failed(
                    task,
                    &model_name,
                    Failure {
                        code: FailureCode::RepositoryError,
                        message: format!("repository {:?} is not registered", task.repos[0].name),
                    },
                )
            }
            Err(error) => {
                return change_failed(
                    task,
                    &model_name,
                    infrastructure(format!("cannot read the repository: {error}")),
                )
            }
        },
    };
    // The risk gate, before anything is pinned, opened or asked (`gate.rs`).
    let gate = match super::gate::before_run(services, claim, &checks, &change_options).await {
        Ok(gate) => gate,
        Err(ending) => return ending,
    };
    let (earlier, conversation) = match conversation(store, task).await {
        Ok(both) => both,
        Err(failure) => return change_failed(task, &model_name, failure),
    };

    // Pinning, the snapshot and the writable view run git and set up namespaces.
    let config = Arc::clone(&services.config);
    let repo_store = services.repos.clone();
    let scratch = super::run_scratch(&config.home, &task.id, claim.run_number);
    let scratch_for_setup = scratch.clone();
    let sandboxes = repo_sandboxes(store, &task.repos).await;
    let kind = task.kind;
    let task_id = task.id.to_string();
    let setup = tokio::task::spawn_blocking(move || {
        let mut repos = question::pin_all(&repo_store, &specs, &|line| tracing::debug!("{line}"))?;
        let mut repo = repos
            .pop()
            .ok_or_else(|| question::SetupError::Infrastructure("no repository pinned".into()))?;
        repo.sandbox = sandboxes.into_iter().next().unwrap_or_default();
        let maintain = kind == TaskKind::Maintain;
        let sandbox = ChangeSandbox::open(&config, &task_id, &repo, &scratch_for_setup, maintain);
        Ok::<_, question::SetupError>((repo, sandbox))
    })
    .await;
    let (mut repo, sandbox) = match setup {
        Ok(Ok(setup)) => setup,
        Ok(Err(error)) => return change_failed(task, &model_name, setup_failure(error)),
        Err(error) => {
            return change_failed(
                task,
                &model_name,
                infrastructure(format!("repository setup failed: {error}")),
            )
        }
    };

    super::stored_notices(task, std::slice::from_mut(&mut repo));
    // Record the commit, so every later run of this task changes the same base.
    if task.repos[0].commit.is_none() {
        let pinned = vec![TaskRepo {
            commit: Some(repo.pinned.commit.clone()),
            ..task.repos[0].clone()
        }];
        let run = claim.run();
        if let Err(error) = store
            .call("recording the pinned commit", |store| {
                store.pin_task_repos(&run, &options.name, pinned.clone())
            })
            .await
        {
            if let Ok(sandbox) = sandbox {
                sandbox.close();
            }
            let _ = warden_sandbox::remove_scratch(&scratch);
            return match error {
                StoreError::LeaseLost { .. } => Ending::LeaseLost,
                other => change_failed(
                    task,
                    &model_name,
                    infrastructure(format!("cannot record the pinned commit: {other}")),
                ),
            };
        }
    }

    let (events, drain) = store_events(
        services.store.clone(),
        task.id.clone(),
        services.redactor.clone(),
    );
    events.emit(Event::TaskStarted {
        task_id: task.id.clone(),
        kind: task.kind,
        // Baseline-mode maintenance asks no model.
        model: if maintain_options.as_ref().is_some_and(|m| !m.model()) {
            warden_engine::maintain::NO_MODEL.to_string()
        } else {
            model_name.clone()
        },
        manifest: question::manifest(std::slice::from_ref(&repo)),
    });
    if let Some(gate) = &gate {
        events.emit(super::gate::request_event(gate));
    }
    let ending = match sandbox {
        Ok(sandbox) => {
            // Cancelling the task kills the commands running in its view at once.
            if let Some(control) = services.running.control(&task.id) {
                control.on_stop(sandbox.canceller());
            }
            if let Some(maintain_options) = maintain_options {
                let (ending, sandbox) = super::maintain_task::run_maintain(
                    services,
                    claim,
                    super::maintain_task::MaintainInput {
                        repo: repo.clone(),
                        sandbox,
                        scratch: scratch.clone(),
                        checks: checks.clone(),
                        publish: change_options.publish,
                        events: events.clone(),
                        options: maintain_options,
                        cancel: cancel.clone(),
                    },
                )
                .await;
                if let Some(sandbox) = sandbox {
                    sandbox.close();
                }
                return super::end_run(ending, events, drain, &scratch).await;
            }
            let ending = run_change_loop(
                services,
                claim,
                LoopInput {
                    repo: &repo,
                    sandbox: &sandbox,
                    scratch: &scratch,
                    checks: &checks,
                    publish: change_options.publish,
                    baseline: change_options.baseline,
                    earlier: &earlier,
                    conversation: &conversation,
                    events: &events,
                    gate,
                },
                cancel,
            )
            .await;
            sandbox.close();
            ending
        }
        Err(failure) => change_failed(task, &model_name, failure),
    };
    super::end_run(ending, events, drain, &scratch).await
}

/// What the loop of a change run works on.
struct LoopInput<'a> {
    repo: &'a question::TaskRepo,
    sandbox: &'a ChangeSandbox,
    scratch: &'a std::path::Path,
    checks: &'a [String],
    publish: bool,
    /// Run the checks on the base first (`--baseline`).
    baseline: bool,
    /// The conversation of the change tasks this one follows up: said before its request.
    earlier: &'a [TranscriptEntry],
    /// The messages exchanged since its request.
    conversation: &'a [TranscriptEntry],
    events: &'a StoreEvents,
    /// The risk gate's decision on the request (`gate.rs`); `None` for maintenance.
    gate: Option<warden_protocol::Gate>,
}

async fn run_change_loop(
    services: &RunServices,
    claim: &Claim,
    input: LoopInput<'_>,
    cancel: CancelFlag,
) -> Ending {
    let task = &claim.task;
    let run = claim.run();
    let model_name = services.model.name();
    let setup = ChangeSetup {
        config: &services.config,
        task_id: &task.id,
        repo: input.repo,
        sandbox: input.sandbox,
        scratch_dir: input.scratch,
        checks: input.checks,
        created_at_ms: u64::try_from(task.created_at_ms).unwrap_or(0),
        co_authors: warden_engine::change::co_authors(&task.metadata),
    };
    let session = match change::change_session(&setup) {
        Ok(session) => session,
        Err(error) => return change_failed(task, &model_name, setup_failure(error)),
    };
    // Each check on the task's timeline as it runs.
    session.report_checks(Arc::new(input.events.clone()));
    // A follow-up on its parent's proposal starts from that proposal's tree: the parent's
    // records of it stand for the same checks under the same configuration.
    session.seed(&parent_validations(&services.store, task).await);
    // Cancelling the task kills a check running in its own view too (the agent's view has
    // its canceller already).
    if let Some(control) = services.running.control(&task.id) {
        let session = Arc::downgrade(&session);
        control.on_stop(move || {
            if let Some(session) = session.upgrade() {
                session.cancel_checks();
            }
        });
    }
    let before = {
        let session = Arc::clone(&session);
        let toolchains = input.sandbox.toolchains.clone();
        let config = Arc::clone(&services.config);
        let events = input.events.clone();
        tokio::task::spawn_blocking(move || {
            change::before_agent(
                &session,
                &config,
                &toolchains,
                &|line| tracing::info!("{line}"),
                &|record| events.emit(record.event()),
            )
        })
        .await
    };
    let prepared = match before {
        Ok(Ok(mut notices)) => {
            notices.extend(change::seed_agent_view(input.sandbox, &session));
            notices
        }
        Ok(Err(failure)) => return change_failed(task, &model_name, failure),
        Err(error) => {
            return change_failed(
                task,
                &model_name,
                infrastructure(format!("preparing the task crashed: {error}")),
            )
        }
    };
    let (inbox, plumbing) = match run_plumbing(services, task, &run).await {
        Ok(mut plumbing) => (plumbing.inbox(&services.store, task), plumbing),
        Err(message) => return change_failed(task, &model_name, infrastructure(message)),
    };
    let RunPlumbing {
        model,
        ledger,
        mut journal,
        replaying,
        ..
    } = plumbing;
    if let Some(gate) = &input.gate {
        super::gate::journal_request(&mut journal, gate).await;
    }
    let notices = [change::preflight_notices(input.repo), prepared].concat();
    let mut baseline = Vec::new();
    if input.baseline && !input.checks.is_empty() {
        let session = Arc::clone(&session);
        let failure =
            match tokio::task::spawn_blocking(move || change::run_baseline(&session)).await {
                Ok(Ok(validations)) => {
                    baseline = validations;
                    None
                }
                Ok(Err((failure, validations))) => {
                    baseline = validations;
                    Some(failure)
                }
                Err(error) => Some(infrastructure(format!("the baseline run crashed: {error}"))),
            };
        if let Some(failure) = failure {
            use warden_runtime::{Clock, Journal, RecordKind};
            let _ = journal
                .append(
                    SystemClock.now_ms(),
                    RecordKind::RunFinished,
                    serde_json::json!({ "outcome": { "failure": failure }, "baseline": baseline }),
                )
                .await;
            let report = RunReport {
                outcome: warden_runtime::RunOutcome::Failed(failure),
                usage: Usage {
                    cost_usd: Some(0.0),
                    ..Usage::default()
                },
                messages: vec![],
                spend: warden_runtime::Spend::default(),
            };
            let change::ChangeReport { result, status, .. } = change::change_report(
                &task.id,
                &model,
                Some(input.sandbox.backend),
                input.checks,
                baseline,
                notices,
                report,
            );
            return finished(services, status, &result);
        }
    }
    let mut tools = match change::change_tools(&setup, &session) {
        Ok(tools) => tools,
        Err(error) => return change_failed(task, &model_name, setup_failure(error)),
    };
    // The operator's MCP servers, in this task's view; ended before the view closes.
    let mcp = match input.sandbox.start_mcp(&services.config).await {
        Ok(mcp) => mcp,
        Err(failure) => return change_failed(task, &model_name, failure),
    };
    tools.extend(mcp.tools());
    if replaying > 0 {
        tracing::info!(%run, replaying, "resuming a change: replaying journaled decisions, re-running their tools");
    }
    // The implementer, then the reviewer per `[gates] review` (`review.rs`).
    let (report, review): (RunReport, _) = super::review::implement(
        super::review::Implement {
            services,
            model: &model,
            task,
            repo: input.repo,
            checks: input.checks,
            earlier: input.earlier,
            conversation: input.conversation,
            journal: &mut journal,
            events: input.events,
            cancel,
            ledger: &ledger,
            inbox: &inbox,
            session: &session,
        },
        &tools,
    )
    .await;
    drop(tools);
    mcp.shutdown().await;
    drop(session);
    let change::ChangeReport {
        mut result,
        mut status,
        reply: _,
    } = change::change_report(
        &task.id,
        &model,
        Some(input.sandbox.backend),
        input.checks,
        baseline,
        notices,
        report,
    );
    result.review = review;
    super::gate::after_run(
        &mut result,
        input.gate,
        input.checks,
        &services.config.gates.policy,
        input.events,
        &mut journal,
    )
    .await;
    if input.publish && status == TaskStatus::Completed {
        match request_publication(&services.store, task, run.number, &mut result).await {
            Ok(true) => status = TaskStatus::WaitingApproval,
            Ok(false) => {}
            Err(failure) => return change_failed(task, &model_name, failure),
        }
    }
    finished(services, status, &result)
}

/// The validations of the proposal of the change this task follows up (none when it has no
/// parent, the parent made no proposal or cannot be read: then nothing is reused).
async fn parent_validations(store: &RunStore, task: &Task) -> Vec<Validation> {
    let Some(parent) = task.follow_up_to.clone() else {
        return Vec::new();
    };
    let earlier = store
        .call("reading the task this one follows up", |store| {
            store.get_task(&parent)
        })
        .await;
    let Ok(Some(earlier)) = earlier else {
        return Vec::new();
    };
    earlier
        .result
        .and_then(|result| serde_json::from_value::<ChangeResult>(result).ok())
        .and_then(|result| match result.outcome {
            ChangeOutcome::Proposal { proposal, .. } => Some(proposal.validations),
            _ => None,
        })
        .unwrap_or_default()
}

/// The run of a task whose publish approval was decided while it waited: with an approved
/// (or consumed: an interrupted publication) approval, publishes the proposal with the run's
/// journal and ends `completed` with the publication (`pushed` or `pr_opened`), or `failed`
/// with publication `failed` and the reason in the notices; with a rejected one, ends
/// `completed` with nothing published. `None`: an ordinary run (the agent works).
async fn decided_publication(services: &RunServices, claim: &Claim) -> Option<Ending> {
    let task = &claim.task;
    let store = &services.store;
    let model_name = services.model.name();
    let approval = match publication::approved_publication(store, task).await {
        Ok(approval) => approval,
        Err(error) => {
            return Some(change_failed(
                task,
                &model_name,
                infrastructure(format!("cannot read the publish approval: {error}")),
            ))
        }
    };
    let Some(approval) = approval else {
        return match publication::rejected_publication(store, task).await {
            Ok(Some(result)) => {
                tracing::info!(task = %task.id, "publication rejected; the task ends with its proposal unpublished");
                Some(finished(services, TaskStatus::Completed, &result))
            }
            Ok(None) => None,
            Err(error) => Some(change_failed(
                task,
                &model_name,
                infrastructure(format!("cannot read the publish approval: {error}")),
            )),
        };
    };
    let journal = match RunJournal::open(services.store.clone(), claim.run()).await {
        Ok(journal) => journal,
        Err(error) => {
            return Some(change_failed(
                task,
                &model_name,
                infrastructure(format!("cannot open the run journal: {error}")),
            ))
        }
    };
    let mut journal = StoreJournal::new(journal, services.redactor.clone());
    let context = publication::ServerPublish {
        store,
        repos: &services.repos,
        settings: &services.service_config.github,
        redactor: &services.redactor,
    };
    tracing::info!(task = %task.id, approval = %approval.id, "publishing the approved proposal");
    // Each step on the task's timeline as it is journaled.
    let (events, drain) = store_events(
        services.store.clone(),
        task.id.clone(),
        services.redactor.clone(),
    );
    let published = {
        let mut reporting = publication::ReportingJournal {
            journal: &mut journal,
            events: &events,
        };
        publication::publish_approved(context, &approval.id, &mut reporting).await
    };
    drain.finish(events).await;
    match published {
        Ok(result) => Some(finished(services, TaskStatus::Completed, &result)),
        Err(error) => {
            tracing::warn!(task = %task.id, approval = %approval.id, %error, "publication failed");
            let pushed_branch = match &error {
                publication::ApprovedPublishError::Publish(failure) if failure.pushed => {
                    Some(failure.branch.clone())
                }
                _ => None,
            };
            let mut result: ChangeResult = task
                .result
                .clone()
                .and_then(|value| serde_json::from_value(value).ok())?;
            if let ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
                *publication = Publication {
                    status: PublicationStatus::Failed,
                    branch: pushed_branch,
                    pr_url: None,
                };
            }
            // A publication that stopped (a refused token, a remote that is down) waits for
            // its cause to be fixed: approving again with the same hash resumes it, reconciling
            // with the remote. One that can never succeed (a changed proposal) ends the task.
            let resumable = matches!(
                error,
                publication::ApprovedPublishError::Publish(_)
                    | publication::ApprovedPublishError::Store(_)
            );
            let advice = if resumable {
                format!(
                    "; fix it and approve again with the same hash to finish publication \
                     (warden approve {} --hash {})",
                    approval.id, approval.subject_hash
                )
            } else {
                String::new()
            };
            if let Some(recorded) = result.approval.as_mut() {
                if recorded.id == approval.id {
                    recorded.status = warden_protocol::ApprovalStatus::Approved;
                    recorded.decided_by = approval.decided_by.clone();
                    recorded.decided_at = approval.decided_at_ms.map(warden_time::rfc3339);
                }
            }
            // The latest attempt's reason replaces an earlier one's.
            result
                .notices
                .retain(|notice| !notice.starts_with("publication failed"));
            result.notices.push(format!(
                "publication failed: {}{advice}",
                services.redactor.text(&error.to_string())
            ));
            let status = if resumable {
                TaskStatus::WaitingApproval
            } else {
                TaskStatus::Failed
            };
            Some(finished(services, status, &result))
        }
    }
}

/// What surrounds the run's request: before it, the conversation of the change tasks it
/// follows up (their requests, questions, answers and replies); after it, the messages exchanged
/// since (clarifying questions and their answers; the worker records each question when the
/// task starts waiting for input).
async fn conversation(
    store: &RunStore,
    task: &Task,
) -> Result<(Vec<TranscriptEntry>, Vec<TranscriptEntry>), Failure> {
    let earlier = super::chain_transcript(store, task).await?;
    Ok((earlier, own_messages(store, task).await?))
}

async fn own_messages(store: &RunStore, task: &Task) -> Result<Vec<TranscriptEntry>, Failure> {
    let messages = store
        .call("reading the task's messages", |store| {
            store.task_messages(&task.id)
        })
        .await
        .map_err(|e| infrastructure(format!("cannot read the task's messages: {e}")))?;
    let mut entries: Vec<TranscriptEntry> = messages
        .into_iter()
        .filter_map(|m| {
            let role = match m.role.as_str() {
                MESSAGE_USER => Role::User,
                MESSAGE_AGENT => Role::Agent,
                _ => return None,
            };
            Some(TranscriptEntry { role, text: m.text })
        })
        .collect();
    // A question nobody answered yet (the run was interrupted right after asking) is asked
    // again rather than left dangling.
    while entries.last().is_some_and(|e| e.role == Role::Agent) {
        entries.pop();
    }
    Ok(entries)
}
