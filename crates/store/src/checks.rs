//! The decisions both backends make on the rows they read: whether a run's lease is still the
//! worker's, whether a task may move, whether an outbox intent is still the worker's to settle,
//! what an interrupted run's task becomes. Each backend reads (and locks) the rows its own way
//! and hands them here, so the rules and the errors they give are written once.

use warden_protocol::{TaskId, TaskStatus};

use crate::rows::{abandoned_result, to_u64};
use crate::state::{is_active, transition_allowed};
use crate::{
    ApprovalStatus, Decision, IdempotencyKey, Intent, IntentStatus, JournalEntry, RunRef,
    StoreError, Task, MAX_INTERRUPTED_RUNS,
};

pub(crate) fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_string(),
    }
}

/// The run is not (or no longer) `worker`'s open run.
pub(crate) fn run_lost(run: &RunRef, worker: &str) -> StoreError {
    StoreError::LeaseLost {
        run: run.clone(),
        worker: worker.to_string(),
    }
}

/// Whether `worker` holds `run`, given the run's row: its worker and when it ended (`None`
/// when there is no such run).
pub(crate) fn check_run_held(
    run: &RunRef,
    worker: &str,
    row: Option<(String, Option<i64>)>,
) -> Result<(), StoreError> {
    match row {
        None => Err(not_found("run", &run.to_string())),
        Some((owner, None)) if owner == worker => Ok(()),
        Some(_) => Err(run_lost(run, worker)),
    }
}

/// A compare-and-set of a task's status found `actual` where the caller expected `expected`.
pub(crate) fn check_status(
    task: &TaskId,
    expected: TaskStatus,
    actual: TaskStatus,
) -> Result<(), StoreError> {
    if actual == expected {
        Ok(())
    } else {
        Err(StoreError::StatusConflict {
            task: task.clone(),
            expected,
            actual,
        })
    }
}

/// `from -> to` is a legal status change ([`transition_allowed`]).
pub(crate) fn check_transition(from: TaskStatus, to: TaskStatus) -> Result<(), StoreError> {
    if transition_allowed(from, to) {
        Ok(())
    } else {
        Err(StoreError::InvalidTransition { from, to })
    }
}

/// A move to an active status continues an open run (`open`: whether the task has one);
/// queued tasks start through a claim instead. Nothing to check for other statuses.
pub(crate) fn check_open_run(task: &TaskId, to: TaskStatus, open: bool) -> Result<(), StoreError> {
    if is_active(to) && !open {
        Err(StoreError::NoOpenRun { task: task.clone() })
    } else {
        Ok(())
    }
}

/// Whether a `transition` to `to` ends the task's open run.
pub(crate) fn transition_ends_run(to: TaskStatus) -> bool {
    to == TaskStatus::Queued || to.is_terminal()
}

/// A run's end may move its task from `from` to `to`: a status that is not active, reachable
/// from `from`.
pub(crate) fn check_finish(from: TaskStatus, to: TaskStatus) -> Result<(), StoreError> {
    if is_active(to) || !transition_allowed(from, to) {
        Err(StoreError::InvalidTransition { from, to })
    } else {
        Ok(())
    }
}

/// What a task whose run was interrupted becomes, given the task with the interruption
/// counted: queued again, or failed for good (with its `abandoned` result, as JSON text) after
/// [`MAX_INTERRUPTED_RUNS`].
pub(crate) fn after_interruption(task: &Task) -> (TaskStatus, Option<String>) {
    if task.interrupted_runs >= MAX_INTERRUPTED_RUNS {
        (TaskStatus::Failed, Some(abandoned_result(task).to_string()))
    } else {
        (TaskStatus::Queued, None)
    }
}

/// An idempotency key seen before (with `stored_hash`) replays its task only for the same
/// request.
pub(crate) fn check_replay(key: &IdempotencyKey, stored_hash: &str) -> Result<(), StoreError> {
    if stored_hash == key.request_hash {
        Ok(())
    } else {
        Err(StoreError::IdempotencyConflict {
            key: key.key.clone(),
        })
    }
}

/// A retry repeats a terminal task only.
pub(crate) fn check_retryable(old: &TaskId, status: TaskStatus) -> Result<(), StoreError> {
    if status.is_terminal() {
        Ok(())
    } else {
        Err(StoreError::NotRetryable {
            task: old.clone(),
            status,
        })
    }
}

fn journal_conflict(run: &RunRef, entry: &JournalEntry, message: String) -> StoreError {
    StoreError::JournalConflict {
        run: run.clone(),
        seq: entry.seq,
        message,
    }
}

/// A journal record goes to an open run, given when the run ended (`None`: no such run).
pub(crate) fn check_journal_run(
    run: &RunRef,
    entry: &JournalEntry,
    ended: Option<Option<i64>>,
) -> Result<(), StoreError> {
    match ended {
        None => Err(not_found("run", &run.to_string())),
        Some(Some(_)) => Err(journal_conflict(run, entry, "the run has ended".into())),
        Some(None) => Ok(()),
    }
}

/// A journal record continues the run's stored chain, given its last record's sequence and
/// hash (`None` for an empty journal); see [`crate::journal::check_append`].
pub(crate) fn check_journal_append(
    run: &RunRef,
    entry: &JournalEntry,
    tail: Option<(i64, String)>,
) -> Result<(), StoreError> {
    let tail = tail
        .map(|(seq, hash)| Ok::<_, StoreError>((to_u64(seq)?, hash)))
        .transpose()?;
    crate::journal::check_append(tail.as_ref().map(|(s, h)| (*s, h.as_str())), entry)
        .map_err(|message| journal_conflict(run, entry, message))
}

/// Another record was stored at this sequence first (a unique-key race the chain check could
/// not see).
pub(crate) fn journal_fork(run: &RunRef, entry: &JournalEntry) -> StoreError {
    journal_conflict(
        run,
        entry,
        "another record was appended at this sequence".into(),
    )
}

/// The status a pending approval takes when decided.
pub(crate) fn decided_status(decision: Decision) -> ApprovalStatus {
    match decision {
        Decision::Approve => ApprovalStatus::Approved,
        Decision::Reject => ApprovalStatus::Rejected,
    }
}

/// The intent (`None`: no such intent) is pending and leased to `worker`, who may settle it.
pub(crate) fn check_intent_held(
    id: &str,
    worker: &str,
    intent: Option<Intent>,
) -> Result<Intent, StoreError> {
    let intent = intent.ok_or_else(|| not_found("outbox intent", id))?;
    if intent.status != IntentStatus::Pending {
        return Err(StoreError::IntentState {
            id: id.to_string(),
            status: intent.status,
        });
    }
    if intent.lease_owner.as_deref() != Some(worker) {
        return Err(StoreError::IntentLeaseLost {
            id: id.to_string(),
            worker: worker.to_string(),
        });
    }
    Ok(intent)
}

/// A failed attempt of `intent`: its status and next attempt time — pending again at
/// `retry_at_ms`, or failed for good (keeping its last due time) when `None`.
pub(crate) fn intent_failure(intent: &Intent, retry_at_ms: Option<i64>) -> (IntentStatus, i64) {
    match retry_at_ms {
        Some(at) => (IntentStatus::Pending, at),
        None => (IntentStatus::Failed, intent.next_attempt_at_ms),
    }
}

/// A refused attempt of chat `message`: its state, next attempt time and delivered revision —
/// due again at `retry_at_ms` (a send that was refused did not happen: `pending`), or given
/// up when `None` (a message never sent fails; a sent one keeps what it shows and drops the
/// edit).
pub(crate) fn chat_failure(
    message: &crate::ChatMessage,
    retry_at_ms: Option<i64>,
) -> (crate::ChatMessageState, i64, i64) {
    use crate::ChatMessageState as State;
    let state = match message.state {
        State::Pending | State::Sending => match retry_at_ms {
            Some(_) => State::Pending,
            None => State::Failed,
        },
        other => other,
    };
    let delivered = match (message.state, retry_at_ms) {
        (State::Sent, None) => message.revision,
        _ => message.delivered_revision,
    };
    (
        state,
        retry_at_ms.unwrap_or(message.next_attempt_at_ms),
        delivered,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunRef {
        RunRef {
            task: TaskId::from_ulid("01HZY8Q6K9V2M3N4P5R6S7T8V9").unwrap(),
            number: 2,
        }
    }

    #[test]
    fn a_run_is_held_only_while_open_and_by_its_worker() {
        let run = run();
        assert!(check_run_held(&run, "w1", Some(("w1".into(), None))).is_ok());
        assert!(matches!(
            check_run_held(&run, "w2", Some(("w1".into(), None))),
            Err(StoreError::LeaseLost { worker, .. }) if worker == "w2"
        ));
        assert!(matches!(
            check_run_held(&run, "w1", Some(("w1".into(), Some(5)))),
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(matches!(
            check_run_held(&run, "w1", None),
            Err(StoreError::NotFound { what: "run", id }) if id == run.to_string()
        ));
    }

    #[test]
    fn a_run_ends_only_in_a_status_that_is_not_active() {
        use TaskStatus::*;
        assert!(check_finish(Running, Completed).is_ok());
        assert!(check_finish(Testing, Queued).is_ok());
        assert!(check_finish(Running, WaitingInput).is_ok());
        // Active, or not reachable.
        assert!(check_finish(Running, Testing).is_err());
        assert!(check_finish(Completed, Failed).is_err());
        assert!(check_open_run(&run().task, Running, false).is_err());
        assert!(check_open_run(&run().task, Running, true).is_ok());
        assert!(check_open_run(&run().task, Queued, false).is_ok());
        assert!(transition_ends_run(Queued) && transition_ends_run(Cancelled));
        assert!(!transition_ends_run(WaitingInput) && !transition_ends_run(Testing));
    }

    #[test]
    fn journal_records_need_an_open_run() {
        let entry = JournalEntry {
            seq: 1,
            at_ms: 0,
            kind: "k".into(),
            payload: serde_json::json!({}),
            prev_hash: crate::GENESIS_HASH.into(),
            hash: "h".into(),
            display: None,
        };
        assert!(check_journal_run(&run(), &entry, Some(None)).is_ok());
        assert!(matches!(
            check_journal_run(&run(), &entry, Some(Some(1))),
            Err(StoreError::JournalConflict { seq: 1, message, .. }) if message == "the run has ended"
        ));
        assert!(matches!(
            check_journal_run(&run(), &entry, None),
            Err(StoreError::NotFound { what: "run", .. })
        ));
    }

    #[test]
    fn only_the_leaseholder_settles_a_pending_intent() {
        let intent = Intent {
            id: "i1".into(),
            task: run().task,
            kind: "callback".into(),
            payload: serde_json::json!({}),
            status: IntentStatus::Pending,
            attempts: 1,
            next_attempt_at_ms: 7,
            lease_owner: Some("w1".into()),
            lease_expires_at_ms: Some(9),
            last_error: None,
            created_at_ms: 0,
            done_at_ms: None,
        };
        assert!(check_intent_held("i1", "w1", Some(intent.clone())).is_ok());
        assert!(matches!(
            check_intent_held("i1", "w2", Some(intent.clone())),
            Err(StoreError::IntentLeaseLost { .. })
        ));
        let done = Intent {
            status: IntentStatus::Done,
            ..intent.clone()
        };
        assert!(matches!(
            check_intent_held("i1", "w1", Some(done)),
            Err(StoreError::IntentState {
                status: IntentStatus::Done,
                ..
            })
        ));
        assert!(matches!(
            check_intent_held("i1", "w1", None),
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(
            intent_failure(&intent, Some(20)),
            (IntentStatus::Pending, 20)
        );
        assert_eq!(intent_failure(&intent, None), (IntentStatus::Failed, 7));
    }
}
