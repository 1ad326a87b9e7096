//! Group commit for the SQLite backend. One thread owns the write connection; writes queue up
//! as jobs, and the thread runs everything queued in one `BEGIN IMMEDIATE` transaction, each
//! job in its own savepoint (a failing job rolls back alone), then commits once — one WAL fsync
//! for the whole batch under `synchronous=FULL`. Replies go out only after the commit, so a
//! caller never sees a write that is not durable. Jobs in a batch run in queue order, so the
//! result is the same as running them one transaction each.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::{Clock, StoreError};

use super::BACKEND;

/// Most jobs committed together.
const MAX_BATCH: usize = 256;

/// Told how the batch ended: `None` when it committed.
pub(super) type Reply = Box<dyn FnOnce(Option<&CommitFailure>) + Send>;

/// Runs one write inside its savepoint; says whether to keep it and how to answer.
pub(super) type Job = Box<dyn FnOnce(&Connection, i64) -> (bool, Reply) + Send>;

/// Why a batch did not commit (every job in it gets this).
#[derive(Debug)]
pub(super) struct CommitFailure {
    message: String,
    retryable: bool,
}

impl CommitFailure {
    pub(super) fn to_error(&self) -> StoreError {
        StoreError::Database {
            backend: BACKEND,
            message: format!("commit failed: {}", self.message),
            retryable: self.retryable,
            source: None,
        }
    }
}

impl From<rusqlite::Error> for CommitFailure {
    fn from(e: rusqlite::Error) -> CommitFailure {
        CommitFailure {
            retryable: matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ),
            message: e.to_string(),
        }
    }
}

pub(super) struct Writer {
    sender: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(conn: Connection, clock: Arc<dyn Clock>) -> Result<Writer, StoreError> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("warden-sqlite-writer".into())
            .spawn(move || run(conn, clock.as_ref(), &receiver))
            .map_err(|e| StoreError::Database {
                backend: BACKEND,
                message: format!("could not start the writer thread: {e}"),
                retryable: false,
                source: Some(Box::new(e)),
            })?;
        Ok(Writer {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    pub(super) fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.sender
            .as_ref()
            .and_then(|sender| sender.send(job).ok())
            .ok_or_else(stopped)
    }
}

/// The writer thread is gone (it can only stop when the store is dropped, or after a panic).
pub(super) fn stopped() -> StoreError {
    StoreError::Database {
        backend: BACKEND,
        message: "the sqlite writer stopped before answering".into(),
        retryable: false,
        source: None,
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread after the batch in hand; joining closes the
        // database before the store is gone.
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(mut conn: Connection, clock: &dyn Clock, receiver: &mpsc::Receiver<Job>) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(&mut conn, clock, batch);
    }
}

fn commit_batch(conn: &mut Connection, clock: &dyn Clock, batch: Vec<Job>) {
    let mut replies = Vec::with_capacity(batch.len());
    let outcome = (|| -> rusqlite::Result<()> {
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for job in batch {
            let savepoint = tx.savepoint()?;
            // The clock is read as the job runs, so timestamps follow commit order.
            let now = clock.now_ms();
            // A panicking job loses its reply (its caller sees the writer stop answering) and
            // its savepoint; the rest of the batch goes on.
            if let Ok((keep, reply)) = catch_unwind(AssertUnwindSafe(|| job(&savepoint, now))) {
                replies.push(reply);
                if keep {
                    savepoint.commit()?;
                }
            }
        }
        tx.commit()
    })();
    let failure = outcome.err().map(CommitFailure::from);
    for reply in replies {
        reply(failure.as_ref());
    }
}
