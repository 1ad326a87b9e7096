//! The task state machine of SPEC §6: which status changes are allowed, which task kinds hold
//! their repositories exclusively, and the stable strings statuses and kinds are stored as.
//! Both backends consult this one table; the SQL only performs the compare-and-set.

use warden_protocol::{TaskKind, TaskStatus};

/// Every status, in SPEC order (for table-driven tests and diagnostics).
pub const ALL_STATUSES: [TaskStatus; 9] = [
    TaskStatus::Queued,
    TaskStatus::WaitingApproval,
    TaskStatus::Running,
    TaskStatus::Testing,
    TaskStatus::WaitingInput,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
    TaskStatus::TimedOut,
];

/// After this many runs lost to an expired lease, a task fails with [`ABANDONED`] instead of
/// being queued again.
pub const MAX_INTERRUPTED_RUNS: u32 = 3;

/// Failure code of a task whose runs kept losing their lease. Kept as a string until
/// `warden_protocol::FailureCode` has an `Abandoned` variant (serialised the same way).
pub const ABANDONED: &str = "abandoned";

/// Whether `from -> to` is a legal status change. Terminal statuses allow nothing; a status
/// never changes to itself.
pub fn transition_allowed(from: TaskStatus, to: TaskStatus) -> bool {
    use TaskStatus::{
        Cancelled, Completed, Failed, Queued, Running, Testing, TimedOut, WaitingApproval,
        WaitingInput,
    };
    match from {
        // A queued task starts (through `claim`), may need an approval before it starts (a
        // dirty-tree start), or ends without running.
        Queued => matches!(
            to,
            Running | WaitingApproval | Cancelled | Failed | TimedOut
        ),
        // Queued again: its run was released (shutdown) or interrupted (lease expired).
        Running => matches!(
            to,
            Queued
                | Testing
                | WaitingInput
                | WaitingApproval
                | Completed
                | Failed
                | Cancelled
                | TimedOut
        ),
        Testing => matches!(
            to,
            Queued | Running | WaitingApproval | Completed | Failed | Cancelled | TimedOut
        ),
        // Answered or approved: queued for a new run, or continued by the run that parked it.
        WaitingInput | WaitingApproval => {
            matches!(to, Queued | Running | Cancelled | TimedOut)
        }
        Completed | Failed | Cancelled | TimedOut => false,
    }
}

/// Statuses in which a task has a live run whose lease matters.
pub fn is_active(status: TaskStatus) -> bool {
    matches!(status, TaskStatus::Running | TaskStatus::Testing)
}

/// Every kind.
const ALL_KINDS: [TaskKind; 3] = [TaskKind::Question, TaskKind::Change, TaskKind::Maintain];

/// Kinds that write to their repositories: at most one active task of these kinds per
/// repository. Questions only read, so they run in parallel with anything.
pub fn is_exclusive(kind: TaskKind) -> bool {
    match kind {
        TaskKind::Change | TaskKind::Maintain => true,
        TaskKind::Question => false,
    }
}

/// The stored (and wire) name of a status.
pub fn status_name(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Queued => "queued",
        TaskStatus::WaitingApproval => "waiting_approval",
        TaskStatus::Running => "running",
        TaskStatus::Testing => "testing",
        TaskStatus::WaitingInput => "waiting_input",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        TaskStatus::TimedOut => "timed_out",
    }
}

pub fn parse_status(name: &str) -> Option<TaskStatus> {
    ALL_STATUSES.into_iter().find(|s| status_name(*s) == name)
}

/// The stored (and wire) name of a kind.
pub fn kind_name(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Question => "question",
        TaskKind::Change => "change",
        TaskKind::Maintain => "maintain",
    }
}

pub fn parse_kind(name: &str) -> Option<TaskKind> {
    ALL_KINDS.into_iter().find(|k| kind_name(*k) == name)
}

/// The stored names of the kinds that hold their repositories exclusively ([`is_exclusive`]).
pub(crate) fn exclusive_kind_names() -> impl Iterator<Item = &'static str> {
    ALL_KINDS
        .into_iter()
        .filter(|k| is_exclusive(*k))
        .map(kind_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_protocol_serialisation() {
        for status in ALL_STATUSES {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status_name(status));
            assert_eq!(parse_status(status_name(status)), Some(status));
        }
        for kind in [TaskKind::Question, TaskKind::Change, TaskKind::Maintain] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind_name(kind));
            assert_eq!(parse_kind(kind_name(kind)), Some(kind));
        }
        assert_eq!(parse_status("paused"), None);
    }

    #[test]
    fn terminal_statuses_allow_nothing_and_nothing_loops() {
        for from in ALL_STATUSES {
            for to in ALL_STATUSES {
                if from.is_terminal() || from == to {
                    assert!(!transition_allowed(from, to), "{from:?} -> {to:?}");
                }
            }
        }
    }
}
