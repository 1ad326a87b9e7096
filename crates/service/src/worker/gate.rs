//! The risk gate of a change run (`warden_engine::gates`): before anything is pinned, opened or
//! asked, the request is classified and the operator's `[gates]` policy applied; after the run,
//! the proposal's actual paths are classified again. Both decisions are events
//! (`gate_decided`), journal records and the result's `gate`.
//!
//! `approve_before_run`: the run approval of the request's hash (one per hash:
//! `warden_engine::gates::run_approval_id`) is created pending and the run ends
//! `waiting_approval`; decided, the task is queued again (`crate::gate`) and the next run
//! finds it approved (consumes it and goes on), or rejected (ends `cancelled`, failure
//! `rejected`, nothing run).

use serde_json::json;
use warden_engine::change::ChangeOptions;
use warden_engine::gates::{self, ChangedPath, RequestRepo, RequestSubject, RUN_APPROVAL_KIND};
use warden_protocol::{
    ChangeOutcome, ChangeResult, Event, Failure, FailureCode, Gate, GateAction, TaskKind,
    TaskStatus, Usage,
};
use warden_runtime::{Clock, EventSink, Journal, RecordKind, SystemClock};
use warden_store::{ApprovalStatus, Claim, NewApproval, RunJournal, StoreError};

use super::change_end::{change_failed, infrastructure};
use super::{Ending, RunServices};
use crate::gate::approval_view;
use crate::journal::{store_events, StoreJournal};
use crate::outage::StoreCalls;

/// Classifies a claimed change task's request and applies the policy: `Ok(Some(gate))` to go
/// on (the decision is the caller's to emit and journal, with the run's own sink and journal),
/// `Ok(None)` for a task the gate does not apply to (maintenance), `Err(ending)` when the run
/// ends here: waiting for the run approval, or rejected.
pub(super) async fn before_run(
    services: &RunServices,
    claim: &Claim,
    checks: &[String],
    options: &ChangeOptions,
) -> Result<Option<Gate>, Ending> {
    let task = &claim.task;
    if task.kind != TaskKind::Change {
        return Ok(None);
    }
    let model_name = services.model.name();
    let policy = &services.config.gates.policy;
    let classified = gates::classify_request(&task.prompt, checks);
    let request_hash = gates::request_hash(&RequestSubject {
        task_id: task.id.as_str(),
        kind: warden_store::state::kind_name(task.kind),
        prompt: &task.prompt,
        repos: task
            .repos
            .iter()
            .map(|repo| RequestRepo {
                name: &repo.name,
                rev: repo.rev.as_deref(),
                source: repo.source.as_deref(),
                // An in-process task's commit is fixed when it is submitted; a server task's
                // is pinned by its first run that goes on, after the gate.
                commit: repo.source.as_ref().and(repo.commit.as_deref()),
            })
            .collect(),
        checks,
        publish: options.publish,
        baseline: options.baseline,
    });
    let mut gate = Gate {
        level: classified.level,
        action: policy.action(classified.level),
        reasons: classified.reasons,
        request_hash,
        approval: None,
        proposal: None,
    };
    if gate.action != GateAction::ApproveBeforeRun {
        return Ok(Some(gate));
    }
    let id = gates::run_approval_id(&task.id, &gate.request_hash);
    let store = &services.store;
    let failed = |error: StoreError| {
        change_failed(
            task,
            &model_name,
            infrastructure(format!("cannot read or create the run approval: {error}")),
        )
    };
    let mut approval = store
        .call("reading the run approval", |store| store.get_approval(&id))
        .await
        .map_err(failed)?;
    if approval.is_none() {
        let new = NewApproval {
            id: id.clone(),
            task: task.id.clone(),
            kind: RUN_APPROVAL_KIND.into(),
            subject_hash: gate.request_hash.clone(),
        };
        approval = match store
            .call("creating the run approval", |store| {
                store.create_approval(new.clone())
            })
            .await
        {
            Ok(created) => Some(created),
            // A run that was interrupted created it.
            Err(StoreError::AlreadyExists { .. }) => store
                .call("reading the run approval", |store| store.get_approval(&id))
                .await
                .map_err(failed)?,
            Err(error) => return Err(failed(error)),
        };
    }
    let Some(mut approval) = approval else {
        return Err(failed(StoreError::NotFound {
            what: "approval",
            id: id.clone(),
        }));
    };
    if approval.subject_hash != gate.request_hash || approval.task != task.id {
        return Err(change_failed(
            task,
            &model_name,
            infrastructure(format!(
                "run approval {id} is bound to another request than this task's"
            )),
        ));
    }
    match approval.status {
        ApprovalStatus::Pending => {
            gate.approval = Some(approval_view(&approval));
            Err(wait_for_approval(services, claim, gate).await)
        }
        ApprovalStatus::Approved => {
            // One approval authorises one run: used now, a crash after this goes on with it
            // consumed.
            approval = store
                .call("consuming the run approval", |store| {
                    store.consume_approval(&id, &gate.request_hash)
                })
                .await
                .map_err(failed)?;
            gate.approval = Some(approval_view(&approval));
            Ok(Some(gate))
        }
        ApprovalStatus::Consumed => {
            gate.approval = Some(approval_view(&approval));
            Ok(Some(gate))
        }
        ApprovalStatus::Rejected => {
            gate.approval = Some(approval_view(&approval));
            Err(rejected(services, claim, gate).await)
        }
    }
}

/// The gate's `gate_decided` event for the request (before the run).
pub(super) fn request_event(gate: &Gate) -> Event {
    Event::GateDecided {
        stage: "request".into(),
        level: gate.level,
        action: gate.action,
        reasons: gates::reason_lines(&gate.reasons),
        approval: gate.approval.as_ref().map(|a| a.id.clone()),
    }
}

/// The journal record of a gate decision.
fn record(stage: &str, gate: &Gate) -> serde_json::Value {
    json!({
        "stage": stage,
        "level": gate.level,
        "action": gate.action,
        "reasons": gate.reasons,
        "request_hash": gate.request_hash,
        "approval": gate.approval,
        "proposal": gate.proposal,
    })
}

/// Journals the request's gate decision in the run's journal, before the agent's first record.
pub(super) async fn journal_request(journal: &mut StoreJournal, gate: &Gate) {
    if let Err(error) = journal
        .append(
            SystemClock.now_ms(),
            RecordKind::GateDecided,
            record("request", gate),
        )
        .await
    {
        tracing::warn!(%error, "cannot journal the gate's decision");
    }
}

/// After the run: the proposal's actual paths classified, its decision in the result's gate,
/// an event, a journal record, and a notice when the proposal reaches a level the request did
/// not show and whose action is stricter than the one that let it run.
pub(super) async fn after_run(
    result: &mut ChangeResult,
    gate: Option<Gate>,
    checks: &[String],
    policy: &gates::GatePolicy,
    events: &dyn EventSink,
    journal: &mut StoreJournal,
) {
    let Some(mut gate) = gate else { return };
    if let ChangeOutcome::Proposal { proposal, .. } = &result.outcome {
        let files: Vec<ChangedPath<'_>> = proposal
            .files
            .iter()
            .map(|file| ChangedPath {
                path: &file.path,
                status: &file.status,
            })
            .collect();
        let decided = gates::proposal_gate(gates::classify_proposal(&files, checks), policy);
        events.emit(Event::GateDecided {
            stage: "proposal".into(),
            level: decided.level,
            action: decided.action,
            reasons: gates::reason_lines(&decided.reasons),
            approval: None,
        });
        if decided.action == GateAction::ApproveBeforeRun && gate.action < decided.action {
            result.notices.push(format!(
                "the proposal is {} risk ({}): the policy approves such changes before they \
                 run, which the request did not show; read the diff before approving",
                gates::level_name(decided.level),
                gates::reason_lines(&decided.reasons).join("; ")
            ));
        }
        gate.proposal = Some(decided);
        if let Err(error) = journal
            .append(
                SystemClock.now_ms(),
                RecordKind::GateDecided,
                record("proposal", &gate),
            )
            .await
        {
            tracing::warn!(%error, "cannot journal the gate's decision");
        }
    }
    result.gate = Some(gate);
}

/// Ends the run `waiting_approval` with the `awaiting_approval` result; nothing ran.
async fn wait_for_approval(services: &RunServices, claim: &Claim, gate: Gate) -> Ending {
    let task = &claim.task;
    let approval = gate.approval.clone();
    let advice = approval.as_ref().map(|a| {
        format!(
            "the risk gate holds this change before it runs ({} risk: {}); approve it with: \
             warden approve {} --hash {}",
            gates::level_name(gate.level),
            gates::reason_lines(&gate.reasons).join("; "),
            a.id,
            a.subject_hash
        )
    });
    let result = ChangeResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: ChangeOutcome::AwaitingApproval {},
        baseline: vec![],
        approval,
        usage: Usage {
            cost_usd: Some(0.0),
            ..Usage::default()
        },
        model: services.model.name(),
        sandbox: None,
        notices: advice.into_iter().collect(),
        maintenance: None,
        gate: Some(gate),
        review: None,
    };
    end_at_gate(services, claim, TaskStatus::WaitingApproval, result).await
}

/// Ends the task `cancelled` with failure `rejected`: its run approval was rejected.
async fn rejected(services: &RunServices, claim: &Claim, gate: Gate) -> Ending {
    let task = &claim.task;
    let by = gate
        .approval
        .as_ref()
        .and_then(|a| a.decided_by.clone())
        .unwrap_or_else(|| "someone".into());
    let id = gate
        .approval
        .as_ref()
        .map(|a| a.id.clone())
        .unwrap_or_default();
    let result = ChangeResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: ChangeOutcome::Failure {
            failure: Failure {
                code: FailureCode::Rejected,
                message: format!("{by} rejected approval {id} to run this change; nothing ran"),
            },
        },
        baseline: vec![],
        approval: gate.approval.clone(),
        usage: Usage {
            cost_usd: Some(0.0),
            ..Usage::default()
        },
        model: services.model.name(),
        sandbox: None,
        notices: vec![],
        maintenance: None,
        gate: Some(gate),
        review: None,
    };
    end_at_gate(services, claim, TaskStatus::Cancelled, result).await
}

/// The event, the journal record and the run's ending of a run the gate ends.
async fn end_at_gate(
    services: &RunServices,
    claim: &Claim,
    status: TaskStatus,
    result: ChangeResult,
) -> Ending {
    let task = &claim.task;
    if let Some(gate) = &result.gate {
        let (events, drain) = store_events(
            services.store.clone(),
            task.id.clone(),
            services.redactor.clone(),
        );
        events.emit(request_event(gate));
        // Its `task_finished` is the store's, with the status the run finishes in.
        drain.finish(events).await;
        match RunJournal::open(services.store.clone(), claim.run()).await {
            Ok(journal) => {
                let mut journal = StoreJournal::new(journal, services.redactor.clone());
                let _ = journal
                    .append(
                        SystemClock.now_ms(),
                        RecordKind::GateDecided,
                        record("request", gate),
                    )
                    .await;
                let _ = journal
                    .append(
                        SystemClock.now_ms(),
                        RecordKind::RunFinished,
                        json!({ "outcome": result.outcome, "status": status }),
                    )
                    .await;
            }
            Err(error) => tracing::warn!(%error, "cannot open the run journal"),
        }
    }
    super::change_end::finished(services, status, &result)
}
