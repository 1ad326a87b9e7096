//! The store's error type. Conflicts a caller must handle (a lost lease, a status that changed
//! under it, a forked journal append, a reused idempotency key) are distinct variants; database
//! failures carry whether retrying the same operation may succeed.

use std::path::PathBuf;

use warden_protocol::{TaskId, TaskStatus};

use crate::state::status_name;
use crate::types::{ApprovalStatus, IntentStatus, RunRef};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL names no supported backend.
    #[error("unsupported database url {0:?}: expected sqlite://PATH or postgres://…")]
    InvalidUrl(String),
    /// The row asked for does not exist.
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// A row with this id exists already.
    #[error("{what} {id} already exists")]
    AlreadyExists { what: &'static str, id: String },
    /// The state machine does not allow this status change.
    #[error("transition {} -> {} is not allowed", status_name(*.from), status_name(*.to))]
    InvalidTransition { from: TaskStatus, to: TaskStatus },
    /// Compare-and-set failed: the task's status is not the one the caller expected.
    #[error("task {task} is {}, not {}", status_name(*.actual), status_name(*.expected))]
    StatusConflict {
        task: TaskId,
        expected: TaskStatus,
        actual: TaskStatus,
    },
    /// Running and testing need a live run; a queued task gets one only through `claim`.
    #[error("task {task} has no open run (queued tasks start through claim)")]
    NoOpenRun { task: TaskId },
    /// The run ended (lease expired and re-queued, cancelled, finished) or belongs to another
    /// worker; the caller must stop working on it.
    #[error("run {run} is no longer held by worker {worker}")]
    LeaseLost { run: RunRef, worker: String },
    /// Only a terminal task can be retried.
    #[error("task {task} is {} and cannot be retried until it ends", status_name(*.status))]
    NotRetryable { task: TaskId, status: TaskStatus },
    /// A journal append does not continue the stored chain (a second writer, a stale tail or
    /// a tampered record).
    #[error("journal append to run {run} rejected at record {seq}: {message}")]
    JournalConflict {
        run: RunRef,
        seq: u64,
        message: String,
    },
    /// A stored journal chain does not verify.
    #[error("journal chain broken at record {seq}: {message}")]
    JournalBroken { seq: u64, message: String },
    /// The idempotency key was used before for a different request.
    #[error("idempotency key {key:?} was already used for a different request")]
    IdempotencyConflict { key: String },
    /// The approval is not in the state the operation needs (decided twice, used twice,
    /// used while pending or rejected).
    #[error("approval {id} is {}, not {}", .actual.as_str(), .expected.as_str())]
    ApprovalState {
        id: String,
        expected: ApprovalStatus,
        actual: ApprovalStatus,
    },
    /// The approval is bound to a different subject than the one presented.
    #[error("approval {id} is bound to a different subject hash")]
    ApprovalMismatch { id: String },
    /// The outbox intent is already done or failed.
    #[error("outbox intent {id} is {}", .status.as_str())]
    IntentState { id: String, status: IntentStatus },
    /// The outbox intent is not leased to this worker (its lease expired and another worker
    /// claimed it, or it was never claimed).
    #[error("outbox intent {id} is not held by worker {worker}")]
    IntentLeaseLost { id: String, worker: String },
    /// A value does not fit the database's integer range (or a stored one does not fit ours).
    #[error("value out of range: {0}")]
    OutOfRange(String),
    /// A stored row or a value to store could not be decoded or encoded.
    #[error("invalid stored data: {0}")]
    InvalidData(String),
    /// The database was migrated by a newer Warden.
    #[error("database schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew { found: i64, supported: i64 },
    /// A file-system operation on the database files failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store does not implement this operation (a wrapping store that does not forward it).
    #[error("{0} is not supported by this store")]
    Unsupported(&'static str),
    /// The database failed; `retryable` when the same operation may succeed later (busy,
    /// serialization failure, deadlock, lost connection, pool exhausted).
    #[error("{backend} error: {message}")]
    Database {
        backend: &'static str,
        message: String,
        retryable: bool,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl StoreError {
    /// Whether retrying the same call may succeed. Conflicts are not retryable: the caller's
    /// view of the world is stale and must be re-read.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Database { retryable, .. } => *retryable,
            StoreError::InvalidUrl(_)
            | StoreError::NotFound { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::InvalidTransition { .. }
            | StoreError::StatusConflict { .. }
            | StoreError::NoOpenRun { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::NotRetryable { .. }
            | StoreError::JournalConflict { .. }
            | StoreError::JournalBroken { .. }
            | StoreError::IdempotencyConflict { .. }
            | StoreError::ApprovalState { .. }
            | StoreError::ApprovalMismatch { .. }
            | StoreError::IntentState { .. }
            | StoreError::IntentLeaseLost { .. }
            | StoreError::OutOfRange(_)
            | StoreError::InvalidData(_)
            | StoreError::SchemaTooNew { .. }
            | StoreError::Io { .. }
            | StoreError::Unsupported(_) => false,
        }
    }

    pub(crate) fn invalid_data(what: impl std::fmt::Display) -> StoreError {
        StoreError::InvalidData(what.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> StoreError {
        StoreError::InvalidData(e.to_string())
    }
}
