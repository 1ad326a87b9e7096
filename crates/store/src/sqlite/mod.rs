//! The embedded SQLite backend. Two connections owned by the store: writes go to a writer
//! thread that group-commits them (`writer.rs`: `BEGIN IMMEDIATE`, a savepoint per write, one
//! fsync per batch), reads run on the other from `tokio::task::spawn_blocking`. WAL with
//! `synchronous=FULL`: a write is acknowledged only once it survives power loss; another process
//! sharing the file waits (busy timeout) instead of failing mid-transaction. A file that is not a
//! database or fails `PRAGMA quick_check` at open is moved aside to `<name>.corrupt-<time>`
//! (never deleted) and a fresh database is created; the store reports it in `notices`.

mod backup;
mod schema;
pub use backup::backup_sqlite;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row, TransactionBehavior};
use warden_protocol::{Event, TaskId, TaskStatus};

use crate::checks::{
    after_interruption, check_finish, check_intent_held, check_journal_append, check_journal_run,
    check_open_run, check_replay, check_retryable, check_status, check_transition, decided_status,
    not_found, run_lost, transition_ends_run,
};
use crate::clock::duration_ms;
use crate::observer::Observers;
use crate::rows::{
    check_approval, check_message_role, check_pinned_repos, event_record, finished_event,
    json_text, name_list, spend_from, status, to_i64, to_u32, to_u64, RawApiToken, RawApproval,
    RawChatMessage, RawEvent, RawIntent, RawJournal, RawMessage, RawRepo, RawRun, RawTask,
    RawWebSession, RawWebUser, API_TOKEN_COLUMNS, APPROVAL_COLUMNS, CHAT_MESSAGE_COLUMNS,
    EVENT_COLUMNS, INTENT_COLUMNS, JOURNAL_COLUMNS, MESSAGE_COLUMNS, MS_PER_DAY, REPO_COLUMNS,
    RUN_COLUMNS, TASK_COLUMNS, WEB_SESSION_COLUMNS, WEB_SESSION_RETENTION_MS, WEB_USER_COLUMNS,
};
use warden_time::compact_timestamp;
use writer::Writer;

use crate::state::{exclusive_kind_names, is_active, kind_name, status_name, ALL_STATUSES};
use crate::types::RUN_INTERRUPTED;
use crate::{
    ApiToken, Approval, ApprovalStatus, BoxFuture, Claim, ClaimFilter, Clock, Completion, Created,
    Decision, EventRecord, EventStream, Finished, IdempotencyKey, Intent, JournalEntry,
    NewApiToken, NewApproval, NewIntent, NewRepo, NewTask, Repository, Requeued, Run, RunRef,
    Spend, Store, StoreError, StoreObserver, StoreOptions, Task, TaskMessage, TaskQuery, TaskRepo,
    UsageEntry, UsageQuery, UsageSummary, UtcDay, MESSAGE_USER,
};
use crate::{ChatMessage, NewChatMessage};
use crate::{NewWebSession, WebSession, WebUser, WEB_CREDENTIAL_PASSWORD};

const BACKEND: &str = "sqlite";
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A corrupt database file that was moved aside at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    pub original: PathBuf,
    pub moved_to: PathBuf,
    /// What was wrong with it.
    pub reason: String,
}

/// The SQLite store. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Writer,
    reader: Mutex<Connection>,
    path: PathBuf,
    quarantine: Option<Quarantine>,
    observers: Observers,
    /// The writer's clock too: reads that depend on the time (active web sessions) ask it.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("quarantine", &self.inner.quarantine)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path` with the system clock.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, StoreOptions::default()).await
    }

    pub async fn open_with(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || open_blocking(path, options.clock))
            .await
            .map_err(join_error)?
    }

    /// The corrupt file moved aside when this store was opened, if any.
    pub fn quarantine(&self) -> Option<&Quarantine> {
        self.inner.quarantine.as_ref()
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` as one write of the next group commit (inside its own savepoint) with the
    /// store clock's time; answers once the batch is durable.
    fn write<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: writer::Job = Box::new(move |conn, now| {
            let result = f(conn, now);
            let keep = result.is_ok();
            let reply: writer::Reply = Box::new(move |failure| {
                let _ = answer.send(match failure {
                    None => result,
                    Some(failure) => Err(failure.to_error()),
                });
            });
            (keep, reply)
        });
        let submitted = self.inner.writer.submit(job);
        Box::pin(async move {
            submitted?;
            answered.await.map_err(|_| writer::stopped())?
        })
    }

    /// [`Self::write`], then (once it committed) `tell` gives the observers what it stored and
    /// turns the write's value into the answer.
    fn write_observed<T, R, F, N>(&self, f: F, tell: N) -> BoxFuture<'static, Result<R, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
        N: FnOnce(&Observers, T) -> R + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let write = self.write(f);
        Box::pin(async move {
            let value = write.await?;
            Ok(tell(&inner.observers, value))
        })
    }

    /// Runs `f` on the read connection in the blocking pool. It sees every write that has
    /// been answered.
    fn read<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                // Reads leave nothing half-done behind a panic, so a poisoned lock is harmless.
                let conn = inner.reader.lock().unwrap_or_else(PoisonError::into_inner);
                f(&conn)
            })
            .await
            .map_err(join_error)?
        })
    }
}

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Database {
        backend: BACKEND,
        message: format!("blocking task failed: {e}"),
        retryable: false,
        source: None,
    }
}

/// `rusqlite::Error` → `StoreError`, busy and locked being retryable.
trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(db_error)
    }
}

fn db_error(e: rusqlite::Error) -> StoreError {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    StoreError::Database {
        backend: BACKEND,
        message: e.to_string(),
        retryable,
        source: Some(Box::new(e)),
    }
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}

// --- opening, quarantine, migrations ---

enum OpenFailure {
    Corrupt(String),
    Other(StoreError),
}

impl From<rusqlite::Error> for OpenFailure {
    fn from(e: rusqlite::Error) -> OpenFailure {
        if is_corruption(&e) {
            OpenFailure::Corrupt(e.to_string())
        } else {
            OpenFailure::Other(db_error(e))
        }
    }
}

fn open_blocking(path: PathBuf, clock: Arc<dyn Clock>) -> Result<SqliteStore, StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| StoreError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let (conn, quarantine) = match open_checked(&path, clock.as_ref()) {
        Ok(conn) => (conn, None),
        Err(OpenFailure::Other(e)) => return Err(e),
        Err(OpenFailure::Corrupt(reason)) => {
            let moved_to = quarantine_files(&path, clock.now_ms())?;
            let conn = match open_checked(&path, clock.as_ref()) {
                Ok(conn) => conn,
                Err(OpenFailure::Other(e)) => return Err(e),
                Err(OpenFailure::Corrupt(again)) => {
                    return Err(StoreError::Database {
                        backend: BACKEND,
                        message: format!(
                            "fresh database at {} is corrupt: {again}",
                            path.display()
                        ),
                        retryable: false,
                        source: None,
                    })
                }
            };
            let quarantine = Quarantine {
                original: path.clone(),
                moved_to,
                reason,
            };
            (conn, Some(quarantine))
        }
    };
    let reader = open_reader(&path).map_err(db_error)?;
    Ok(SqliteStore {
        inner: Arc::new(Inner {
            writer: Writer::start(conn, Arc::clone(&clock))?,
            reader: Mutex::new(reader),
            path,
            quarantine,
            observers: Observers::default(),
            clock,
        }),
    })
}

fn open_checked(path: &Path, clock: &dyn Clock) -> Result<Connection, OpenFailure> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenFailure::Other(StoreError::Database {
            backend: BACKEND,
            message: format!("could not enable WAL (journal mode is {mode})"),
            retryable: false,
            source: None,
        }));
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    let problems = check_rows(&conn, "PRAGMA quick_check")?;
    if !problems.is_empty() {
        return Err(OpenFailure::Corrupt(problems.join("; ")));
    }
    migrate(&mut conn, clock)?;
    Ok(conn)
}

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

/// Runs an integrity pragma; returns its complaints (none when it says `ok`).
fn check_rows(conn: &Connection, pragma: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare(pragma)?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        let row = row?;
        if row != "ok" {
            problems.push(row);
        }
    }
    Ok(problems)
}

/// Moves `path` and its `-wal`/`-shm`/`-journal` companions to `<name>.corrupt-<time>[-n]`.
fn quarantine_files(path: &Path, now_ms: i64) -> Result<PathBuf, StoreError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "warden.db".to_string());
    let stamp = compact_timestamp(now_ms);
    let mut moved_to = path.with_file_name(format!("{name}.corrupt-{stamp}"));
    let mut n = 1;
    while moved_to.exists() {
        moved_to = path.with_file_name(format!("{name}.corrupt-{stamp}-{n}"));
        n += 1;
    }
    std::fs::rename(path, &moved_to).map_err(io(path))?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let companion = PathBuf::from(format!("{}{suffix}", path.display()));
        if companion.exists() {
            let target = PathBuf::from(format!("{}{suffix}", moved_to.display()));
            std::fs::rename(&companion, &target).map_err(io(&companion))?;
        }
    }
    Ok(moved_to)
}

/// The SQLite schema's migrations, `(version, sql)` in order: for tests that build a database
/// as an earlier Warden left it and open it with this one.
#[doc(hidden)]
pub fn sqlite_migrations() -> &'static [(i64, &'static str)] {
    schema::MIGRATIONS
}

fn migrate(conn: &mut Connection, clock: &dyn Clock) -> Result<(), OpenFailure> {
    let latest = schema::MIGRATIONS.last().map_or(0, |(v, _)| *v);
    for (version, sql) in schema::MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version INTEGER PRIMARY KEY NOT NULL,
                applied_at_ms INTEGER NOT NULL
            ) STRICT",
        )?;
        let current: i64 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version",
            [],
            |row| row.get(0),
        )?;
        if current > latest {
            return Err(OpenFailure::Other(StoreError::SchemaTooNew {
                found: current,
                supported: latest,
            }));
        }
        if *version <= current {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, ?2)",
            params![version, clock.now_ms()],
        )?;
        tx.commit()?;
    }
    Ok(())
}

// --- row readers ---

fn read_task(row: &Row<'_>) -> rusqlite::Result<RawTask> {
    Ok(RawTask {
        id: row.get(0)?,
        kind: row.get(1)?,
        status: row.get(2)?,
        owner: row.get(3)?,
        prompt: row.get(4)?,
        repos: row.get(5)?,
        priority: row.get(6)?,
        created_at_ms: row.get(7)?,
        updated_at_ms: row.get(8)?,
        follow_up_to: row.get(9)?,
        retry_of: row.get(10)?,
        result: row.get(11)?,
        metadata: row.get(12)?,
        run_count: row.get(13)?,
        interrupted_runs: row.get(14)?,
        callback_url: row.get(15)?,
    })
}

fn read_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        task_id: row.get(0)?,
        number: row.get(1)?,
        worker: row.get(2)?,
        started_at_ms: row.get(3)?,
        heartbeat_at_ms: row.get(4)?,
        lease_expires_at_ms: row.get(5)?,
        ended_at_ms: row.get(6)?,
        outcome: row.get(7)?,
    })
}

fn read_journal(row: &Row<'_>) -> rusqlite::Result<RawJournal> {
    Ok(RawJournal {
        seq: row.get(0)?,
        at_ms: row.get(1)?,
        kind: row.get(2)?,
        payload: row.get(3)?,
        prev_hash: row.get(4)?,
        hash: row.get(5)?,
        display: row.get(6)?,
    })
}

fn read_event(row: &Row<'_>) -> rusqlite::Result<RawEvent> {
    Ok(RawEvent {
        seq: row.get(0)?,
        task_seq: row.get(1)?,
        task_id: row.get(2)?,
        at_ms: row.get(3)?,
        event: row.get(4)?,
    })
}

fn read_approval(row: &Row<'_>) -> rusqlite::Result<RawApproval> {
    Ok(RawApproval {
        id: row.get(0)?,
        task_id: row.get(1)?,
        kind: row.get(2)?,
        subject_hash: row.get(3)?,
        status: row.get(4)?,
        created_at_ms: row.get(5)?,
        decided_by: row.get(6)?,
        decided_at_ms: row.get(7)?,
        consumed_at_ms: row.get(8)?,
    })
}

fn read_intent(row: &Row<'_>) -> rusqlite::Result<RawIntent> {
    Ok(RawIntent {
        id: row.get(0)?,
        task_id: row.get(1)?,
        kind: row.get(2)?,
        payload: row.get(3)?,
        status: row.get(4)?,
        attempts: row.get(5)?,
        next_attempt_at_ms: row.get(6)?,
        lease_owner: row.get(7)?,
        lease_expires_at_ms: row.get(8)?,
        last_error: row.get(9)?,
        created_at_ms: row.get(10)?,
        done_at_ms: row.get(11)?,
    })
}

fn load_task(conn: &Connection, id: &str) -> Result<Option<Task>, StoreError> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
        .db()?
        .query_row([id], read_task)
        .optional()
        .db()?
        .map(RawTask::decode)
        .transpose()
}

fn require_task(conn: &Connection, id: &TaskId) -> Result<Task, StoreError> {
    load_task(conn, id.as_str())?.ok_or_else(|| not_found("task", id.as_str()))
}

fn task_status(conn: &Connection, id: &TaskId) -> Result<TaskStatus, StoreError> {
    let name: Option<String> = conn
        .prepare_cached("SELECT status FROM tasks WHERE id = ?1")
        .db()?
        .query_row([id.as_str()], |row| row.get(0))
        .optional()
        .db()?;
    status(&name.ok_or_else(|| not_found("task", id.as_str()))?)
}

fn has_open_run(conn: &Connection, id: &TaskId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM runs WHERE task_id = ?1 AND ended_at_ms IS NULL")
        .db()?
        .exists([id.as_str()])
        .db()
}

fn close_open_runs(
    conn: &Connection,
    id: &TaskId,
    outcome: &str,
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE runs SET ended_at_ms = ?2, outcome = ?3 WHERE task_id = ?1 AND ended_at_ms IS NULL",
    )
    .db()?
    .execute(params![id.as_str(), now, outcome])
    .db()?;
    Ok(())
}

/// Ends the journal of each open run of the task with the record saying how the task ended
/// ([`crate::journal::ended_from_outside`]), inside the caller's write, before the runs close.
fn end_open_journals(
    conn: &Connection,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    let result: Option<serde_json::Value> = result.map(serde_json::from_str).transpose()?;
    let open: Vec<i64> = conn
        .prepare_cached("SELECT number FROM runs WHERE task_id = ?1 AND ended_at_ms IS NULL")
        .db()?
        .query_map(params![id.as_str()], |row| row.get(0))
        .db()?
        .collect::<Result<_, _>>()
        .db()?;
    for number in open {
        let tail: Option<(i64, String)> = conn
            .prepare_cached(
                "SELECT seq, hash FROM journal WHERE task_id = ?1 AND run_number = ?2
                 ORDER BY seq DESC LIMIT 1",
            )
            .db()?
            .query_row(params![id.as_str(), number], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .db()?;
        // A run that journaled nothing yet has no chain to end.
        let Some((seq, hash)) = tail else { continue };
        let entry = crate::journal::ended_from_outside(
            (crate::rows::to_u64(seq)?, &hash),
            crate::rows::to_u64(now)?,
            to,
            result.as_ref(),
        )?;
        insert_journal(conn, id, number, &entry)?;
    }
    Ok(())
}

/// Stores one journal record of run `number` of `task` (its chain was checked by the caller).
fn insert_journal(
    conn: &Connection,
    task: &TaskId,
    number: i64,
    entry: &crate::journal::JournalEntry,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO journal (task_id, run_number, seq, at_ms, kind, payload, prev_hash, hash,
                              display)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .db()?
    .execute(params![
        task.as_str(),
        number,
        to_i64(entry.seq)?,
        to_i64(entry.at_ms)?,
        entry.kind,
        serde_json::to_string(&entry.payload)?,
        entry.prev_hash,
        entry.hash,
        entry.display,
    ])
    .db()?;
    Ok(())
}

/// Moves the task to `to`; a terminal `to` stores its `task_finished` event with it (returned,
/// for the observers once the write commits).
fn set_status(
    conn: &Connection,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(Task, Option<EventRecord>), StoreError> {
    let task = conn
        .prepare_cached(&format!(
            "UPDATE tasks SET status = ?2, result = COALESCE(?3, result), updated_at_ms = ?4
             WHERE id = ?1 RETURNING {TASK_COLUMNS}"
        ))
        .db()?
        .query_row(
            params![id.as_str(), status_name(to), result, now],
            read_task,
        )
        .db()?
        .decode()?;
    if !to.is_terminal() {
        return Ok((task, None));
    }
    let record = insert_event(conn, id, finished_event(to, task.result.as_ref()), now)?;
    Ok((task, Some(record)))
}

/// Appends `event` to the task's stream, numbered.
fn insert_event(
    conn: &Connection,
    task: &TaskId,
    event: Event,
    now: i64,
) -> Result<EventRecord, StoreError> {
    let text = serde_json::to_string(&event)?;
    let (seq, task_seq) = conn
        .prepare_cached(
            "INSERT INTO events (task_id, task_seq, at_ms, event)
         VALUES (?1, (SELECT COALESCE(MAX(task_seq), 0) + 1 FROM events
                      WHERE task_id = ?1), ?2, ?3)
         RETURNING seq, task_seq",
        )
        .db()?
        .query_row(params![task.as_str(), now, text], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .db()?;
    event_record(task, seq, task_seq, now, event)
}

/// Fails unless the run is open and `worker`'s.
fn check_run_held(conn: &Connection, run: &RunRef, worker: &str) -> Result<(), StoreError> {
    let row: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT worker, ended_at_ms FROM runs WHERE task_id = ?1 AND number = ?2")
        .db()?
        .query_row(params![run.task.as_str(), run.number], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()
        .db()?;
    crate::checks::check_run_held(run, worker, row)
}

fn exclusive_kinds() -> String {
    name_list(exclusive_kind_names())
}

/// Claims the best claimable task (see [`Store::claim`]) inside the caller's write. `kinds` and
/// the exclusive kinds are `name_list`s.
fn claim_one(
    conn: &Connection,
    now: i64,
    worker: &str,
    kinds: &str,
    only: Option<&str>,
    lease_ms: i64,
) -> Result<Option<Claim>, StoreError> {
    // INDEXED BY: without statistics the planner prefers sorting every queued row to
    // walking the partial queue index, and scanning all tasks to find running ones.
    let claimed = conn
        .prepare_cached(&format!(
            "UPDATE tasks SET status = 'running', run_count = run_count + 1,
                 updated_at_ms = ?1
             WHERE id = (
                 SELECT t.id FROM tasks t INDEXED BY tasks_queue
                 WHERE t.status = 'queued'
                   AND (?2 = ',' OR instr(?2, ',' || t.kind || ',') > 0)
                   AND (?4 IS NULL OR t.id = ?4)
                   AND (instr(?3, ',' || t.kind || ',') = 0 OR NOT EXISTS (
                       SELECT 1 FROM tasks o INDEXED BY tasks_active
                       CROSS JOIN task_repos held
                       CROSS JOIN task_repos mine
                       WHERE o.status IN ('running', 'testing')
                         AND instr(?3, ',' || o.kind || ',') > 0
                         AND held.task_id = o.id
                         AND mine.task_id = t.id AND mine.repo = held.repo))
                 ORDER BY t.priority DESC, t.created_at_ms, t.id
                 LIMIT 1)
             RETURNING {TASK_COLUMNS}"
        ))
        .db()?
        .query_row(params![now, kinds, exclusive_kinds(), only], read_task)
        .optional()
        .db()?;
    let Some(raw) = claimed else {
        return Ok(None);
    };
    let task = raw.decode()?;
    let expires = now.saturating_add(lease_ms);
    conn.prepare_cached(
        "INSERT INTO runs (task_id, number, worker, started_at_ms, heartbeat_at_ms,
             lease_expires_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
    )
    .db()?
    .execute(params![task.id.as_str(), task.runs, worker, now, expires])
    .db()?;
    Ok(Some(Claim {
        run_number: task.runs,
        task,
        lease_expires_at_ms: expires,
    }))
}

/// Ends a completion's run exactly as `finish_run` does (`set_status` stores the
/// `task_finished` of a terminal status), inside the caller's write. `Ok(Err(_))` when a check
/// failed: nothing was written for it.
fn finish_one(
    conn: &Connection,
    completion: Completion,
    now: i64,
) -> Result<Result<Finished, StoreError>, StoreError> {
    let Completion {
        run,
        worker,
        status: to,
        result,
    } = completion;
    let checked = (|| {
        let result = json_text(result.as_ref())?;
        check_run_held(conn, &run, &worker)?;
        check_finish(task_status(conn, &run.task)?, to)?;
        Ok(result)
    })();
    let result = match checked {
        Ok(result) => result,
        Err(error @ StoreError::Database { .. }) => return Err(error),
        Err(error) => return Ok(Err(error)),
    };
    close_open_runs(conn, &run.task, status_name(to), now)?;
    let (task, event) = set_status(conn, &run.task, to, result.as_deref(), now)?;
    Ok(Ok(Finished {
        task,
        events: event.into_iter().collect(),
    }))
}

const SPEND_COLUMNS: &str =
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(cached_input_tokens), 0), \
     COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_micro_usd), 0), \
     COUNT(*) - COUNT(cost_micro_usd), COUNT(*)";

fn read_spend(row: &Row<'_>) -> rusqlite::Result<[i64; 6]> {
    Ok([
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ])
}

fn load_approval(conn: &Connection, id: &str) -> Result<Option<Approval>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_approval)
    .optional()
    .db()?
    .map(RawApproval::decode)
    .transpose()
}

fn load_intent(conn: &Connection, id: &str) -> Result<Option<Intent>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {INTENT_COLUMNS} FROM outbox WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_intent)
    .optional()
    .db()?
    .map(RawIntent::decode)
    .transpose()
}

/// An intent `worker` holds and that is still pending, or why not.
fn held_intent(conn: &Connection, id: &str, worker: &str) -> Result<Intent, StoreError> {
    check_intent_held(id, worker, load_intent(conn, id)?)
}

/// Ends each `(task, run)` as interrupted and queues its task again, or fails it abandoned
/// after [`crate::MAX_INTERRUPTED_RUNS`] interruptions; also the events that stored.
fn interrupt_runs(
    conn: &Connection,
    runs: Vec<(String, i64)>,
    now: i64,
) -> Result<(Vec<Requeued>, Vec<EventRecord>), StoreError> {
    let mut requeued = Vec::with_capacity(runs.len());
    let mut events = Vec::new();
    for (task_id, number) in runs {
        let id = crate::rows::task_id(task_id)?;
        close_open_runs(conn, &id, RUN_INTERRUPTED, now)?;
        let task = conn
            .prepare_cached(&format!(
                "UPDATE tasks SET interrupted_runs = interrupted_runs + 1 WHERE id = ?1
                 RETURNING {TASK_COLUMNS}"
            ))
            .db()?
            .query_row([id.as_str()], read_task)
            .db()?
            .decode()?;
        let (to, result) = after_interruption(&task);
        let (_, event) = set_status(conn, &id, to, result.as_deref(), now)?;
        events.extend(event);
        requeued.push(Requeued {
            run: RunRef {
                task: id,
                number: to_u32(number)?,
            },
            status: to,
        });
    }
    Ok((requeued, events))
}

fn read_repo(row: &Row<'_>) -> rusqlite::Result<RawRepo> {
    Ok(RawRepo {
        name: row.get(0)?,
        source: row.get(1)?,
        branch: row.get(2)?,
        checks: row.get(3)?,
        created_by: row.get(4)?,
        created_at_ms: row.get(5)?,
        mounts: row.get(6)?,
        prepare: row.get(7)?,
    })
}

fn load_repo(conn: &Connection, name: &str) -> Result<Option<Repository>, StoreError> {
    conn.prepare_cached(&format!("SELECT {REPO_COLUMNS} FROM repos WHERE name = ?1"))
        .db()?
        .query_row([name], read_repo)
        .optional()
        .db()?
        .map(RawRepo::decode)
        .transpose()
}

fn read_api_token(row: &Row<'_>) -> rusqlite::Result<RawApiToken> {
    Ok(RawApiToken {
        id: row.get(0)?,
        name: row.get(1)?,
        role: row.get(2)?,
        digest: row.get(3)?,
        created_by: row.get(4)?,
        created_at_ms: row.get(5)?,
        revoked_at_ms: row.get(6)?,
    })
}

fn read_chat_message(row: &Row<'_>) -> rusqlite::Result<RawChatMessage> {
    Ok(RawChatMessage {
        id: row.get(0)?,
        channel: row.get(1)?,
        chat: row.get(2)?,
        task_id: row.get(3)?,
        text: row.get(4)?,
        markup: row.get(5)?,
        state: row.get(6)?,
        message_id: row.get(7)?,
        revision: row.get(8)?,
        delivered_revision: row.get(9)?,
        attempts: row.get(10)?,
        next_attempt_at_ms: row.get(11)?,
        last_error: row.get(12)?,
        created_at_ms: row.get(13)?,
        updated_at_ms: row.get(14)?,
    })
}

fn load_chat_message(conn: &Connection, id: &str) -> Result<Option<ChatMessage>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_chat_message)
    .optional()
    .db()?
    .map(RawChatMessage::decode)
    .transpose()
}

/// Inserts `message` as pending and due at `now`, unless its id exists.
fn insert_chat_message(
    conn: &Connection,
    message: &NewChatMessage,
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO chat_messages (id, channel, chat, task_id, text, markup, state, revision,
             delivered_revision, attempts, next_attempt_at_ms, created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 1, 0, 0, ?7, ?7, ?7)
         ON CONFLICT (id) DO NOTHING",
    )
    .db()?
    .execute(params![
        message.id,
        message.channel,
        message.chat,
        message.task.as_ref().map(TaskId::as_str),
        message.text,
        message.markup,
        now
    ])
    .db()?;
    Ok(())
}

fn read_web_user(row: &Row<'_>) -> rusqlite::Result<WebUser> {
    Ok(RawWebUser {
        name: row.get(0)?,
        role: row.get(1)?,
        password_hash: row.get(2)?,
        created_at_ms: row.get(3)?,
        updated_at_ms: row.get(4)?,
    }
    .decode())
}

fn read_web_session(row: &Row<'_>) -> rusqlite::Result<WebSession> {
    Ok(RawWebSession {
        id: row.get(0)?,
        digest: row.get(1)?,
        name: row.get(2)?,
        role_at_sign_in: row.get(3)?,
        credential: row.get(4)?,
        address: row.get(5)?,
        user_agent: row.get(6)?,
        created_at_ms: row.get(7)?,
        expires_at_ms: row.get(8)?,
        revoked_at_ms: row.get(9)?,
    }
    .decode())
}

/// Revokes the unrevoked sessions `name` signed in with a password.
fn revoke_password_sessions(conn: &Connection, name: &str, now: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE web_sessions SET revoked_at_ms = ?3
         WHERE name = ?1 AND credential = ?2 AND revoked_at_ms IS NULL",
    )
    .db()?
    .execute(params![name, WEB_CREDENTIAL_PASSWORD, now])
    .db()?;
    Ok(())
}

fn read_message(row: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
        seq: row.get(0)?,
        role: row.get(1)?,
        text: row.get(2)?,
        author: row.get(3)?,
        at_ms: row.get(4)?,
    })
}

/// Appends a message to an existing task's conversation (the caller checked the task).
fn insert_message(
    conn: &Connection,
    task: &TaskId,
    role: &str,
    text: &str,
    author: &str,
    now: i64,
) -> Result<TaskMessage, StoreError> {
    check_message_role(role)?;
    conn.prepare_cached(&format!(
        "INSERT INTO task_messages (task_id, seq, role, text, author, at_ms)
         VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_messages WHERE task_id = ?1),
                 ?2, ?3, ?4, ?5)
         RETURNING {MESSAGE_COLUMNS}"
    ))
    .db()?
    .query_row(
        params![task.as_str(), role, text, author, now],
        read_message,
    )
    .db()?
    .decode()
}

/// The `WHERE` clause of a usage summary: `?1` owner, `?2` since.
const USAGE_FILTER: &str = "(?1 IS NULL OR task_id IN (SELECT id FROM tasks WHERE owner = ?1))
     AND (?2 IS NULL OR at_ms >= ?2)";

/// Runs a grouped spend query whose first column is the group key.
fn grouped_spend<K: rusqlite::types::FromSql>(
    conn: &Connection,
    sql: &str,
    query: &UsageQuery,
) -> Result<Vec<(K, Spend)>, StoreError> {
    let mut statement = conn.prepare_cached(sql).db()?;
    let rows = statement
        .query_map(params![query.owner, query.since_ms], |row| {
            Ok((
                row.get::<_, K>(0)?,
                [
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ],
            ))
        })
        .db()?;
    rows.map(|row| {
        let (key, sums) = row.db()?;
        Ok((key, spend_from(sums)?))
    })
    .collect()
}

/// Tells the observers the events interrupted runs stored (the `task_finished` of an abandoned
/// task).
fn tell_interrupted(
    observers: &Observers,
    (requeued, events): (Vec<Requeued>, Vec<EventRecord>),
) -> Vec<Requeued> {
    observers.events(&events);
    requeued
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn notices(&self) -> Vec<String> {
        self.inner
            .quarantine
            .iter()
            .map(|q| {
                format!(
                    "database {} was corrupt ({}); moved it to {} and started a fresh one",
                    q.original.display(),
                    q.reason,
                    q.moved_to.display()
                )
            })
            .collect()
    }

    fn add_observer(&self, observer: Weak<dyn StoreObserver>) {
        self.inner.observers.add(observer);
    }

    fn check_integrity(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.read(|conn| {
            let problems = check_rows(conn, "PRAGMA integrity_check").db()?;
            let fk = check_rows(conn, "PRAGMA foreign_key_check").db()?;
            if problems.is_empty() && fk.is_empty() {
                Ok(())
            } else {
                Err(StoreError::Database {
                    backend: BACKEND,
                    message: format!(
                        "integrity check failed: {}",
                        problems
                            .into_iter()
                            .chain(fk)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    retryable: false,
                    source: None,
                })
            }
        })
    }

    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.write(move |conn, now| {
            if let Some(key) = &idempotency {
                let seen: Option<(String, String)> = conn
                    .prepare_cached(
                        "SELECT request_hash, task_id FROM idempotency_keys
                         WHERE owner = ?1 AND key = ?2",
                    )
                    .db()?
                    .query_row(params![key.owner, key.key], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()
                    .db()?;
                if let Some((hash, task_id)) = seen {
                    check_replay(key, &hash)?;
                    let task =
                        load_task(conn, &task_id)?.ok_or_else(|| not_found("task", &task_id))?;
                    return Ok(Created::Replayed(task));
                }
            }
            if let Some(old) = &task.retry_of {
                check_retryable(old, task_status(conn, old)?)?;
            }
            if let Some(parent) = &task.follow_up_to {
                task_status(conn, parent)?;
            }
            if load_task(conn, task.id.as_str())?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "task",
                    id: task.id.to_string(),
                });
            }
            conn.prepare_cached(
                "INSERT INTO tasks (id, kind, status, owner, prompt, repos, priority,
                     created_at_ms, updated_at_ms, follow_up_to, retry_of, result, metadata,
                     callback_url)
                 VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, NULL, ?10, ?11)",
            )
            .db()?
            .execute(params![
                task.id.as_str(),
                kind_name(task.kind),
                task.owner,
                task.prompt,
                serde_json::to_string(&task.repos)?,
                task.priority,
                now,
                task.follow_up_to.as_ref().map(TaskId::as_str),
                task.retry_of.as_ref().map(TaskId::as_str),
                serde_json::to_string(&task.metadata)?,
                task.callback_url,
            ])
            .db()?;
            {
                let mut insert_repo = conn
                    .prepare_cached(
                        "INSERT INTO task_repos (task_id, repo) VALUES (?1, ?2)
                         ON CONFLICT DO NOTHING",
                    )
                    .db()?;
                for repo in &task.repos {
                    insert_repo
                        .execute(params![task.id.as_str(), repo.name])
                        .db()?;
                }
            }
            if let Some(key) = &idempotency {
                conn.prepare_cached(
                    "INSERT INTO idempotency_keys (owner, key, request_hash, task_id, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .db()?
                .execute(params![
                    key.owner,
                    key.key,
                    key.request_hash,
                    task.id.as_str(),
                    now
                ])
                .db()?;
            }
            let created = require_task(conn, &task.id)?;
            Ok(Created::New(created))
        })
    }

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        let id = id.clone();
        self.read(move |conn| load_task(conn, id.as_str()))
    }

    fn list_tasks(&self, query: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks
                     WHERE (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR status = ?2)
                       AND (?3 IS NULL OR id < ?3)
                     ORDER BY id DESC LIMIT ?4"
                ))
                .db()?;
            let rows = statement
                .query_map(
                    params![
                        query.owner,
                        query.status.map(status_name),
                        query.before.as_ref().map(TaskId::as_str),
                        query.limit
                    ],
                    read_task,
                )
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let id = id.clone();
        self.write_observed(
            move |conn, now| {
                check_transition(from, to)?;
                let result = json_text(result.as_ref())?;
                check_status(&id, from, task_status(conn, &id)?)?;
                check_open_run(&id, to, is_active(to) && has_open_run(conn, &id)?)?;
                if to.is_terminal() {
                    end_open_journals(conn, &id, to, result.as_deref(), now)?;
                }
                if transition_ends_run(to) {
                    close_open_runs(conn, &id, status_name(to), now)?;
                }
                set_status(conn, &id, to, result.as_deref(), now)
            },
            |observers, (task, event)| {
                observers.events(&event);
                task
            },
        )
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        let worker = worker.to_string();
        let kinds = name_list(filter.kinds.iter().map(|k| kind_name(*k)));
        let only = filter.task.as_ref().map(|t| t.as_str().to_string());
        let lease_ms = duration_ms(lease);
        self.write_observed(
            move |conn, now| claim_one(conn, now, &worker, &kinds, only.as_deref(), lease_ms),
            |observers, claim| {
                observers.claims(&claim);
                claim
            },
        )
    }

    fn finish_and_claim<'a>(
        &'a self,
        completion: Completion,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<(Finished, Option<Claim>), StoreError>> {
        let kinds = name_list(filter.kinds.iter().map(|k| kind_name(*k)));
        let only = filter.task.as_ref().map(|t| t.as_str().to_string());
        let lease_ms = duration_ms(lease);
        self.write_observed(
            move |conn, now| {
                let worker = completion.worker.clone();
                // A failed check wrote nothing; the job's error rolls back its savepoint anyway.
                let finished = finish_one(conn, completion, now)??;
                let claim = claim_one(conn, now, &worker, &kinds, only.as_deref(), lease_ms)?;
                Ok((finished, claim))
            },
            |observers, (finished, claim)| {
                observers.finished([&finished]);
                observers.claims(&claim);
                (finished, claim)
            },
        )
    }

    fn claim_batch<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        let worker = worker.to_string();
        let kinds = name_list(filter.kinds.iter().map(|k| kind_name(*k)));
        let only = filter.task.as_ref().map(|t| t.as_str().to_string());
        let lease_ms = duration_ms(lease);
        self.write_observed(
            move |conn, now| {
                let mut claims = Vec::new();
                while claims.len() < max {
                    match claim_one(conn, now, &worker, &kinds, only.as_deref(), lease_ms)? {
                        Some(claim) => claims.push(claim),
                        None => break,
                    }
                }
                Ok(claims)
            },
            |observers, claims| {
                observers.claims(&claims);
                claims
            },
        )
    }

    fn finish_runs(
        &self,
        completions: Vec<Completion>,
    ) -> BoxFuture<'_, Result<Vec<Result<Finished, StoreError>>, StoreError>> {
        // One write: the writer thread's group commit already shares the fsync with whatever
        // else is being written.
        self.write_observed(
            move |conn, now| {
                completions
                    .into_iter()
                    .map(|completion| finish_one(conn, completion, now))
                    .collect::<Result<Vec<_>, _>>()
            },
            |observers, outcomes| {
                observers.finished(outcomes.iter().flatten());
                outcomes
            },
        )
    }

    fn heartbeat<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        let run = run.clone();
        let worker = worker.to_string();
        let lease_ms = duration_ms(lease);
        self.write(move |conn, now| {
            let expires = now.saturating_add(lease_ms);
            let updated = conn
                .prepare_cached(
                    "UPDATE runs SET heartbeat_at_ms = ?4, lease_expires_at_ms = ?5
                     WHERE task_id = ?1 AND number = ?2 AND worker = ?3 AND ended_at_ms IS NULL",
                )
                .db()?
                .execute(params![run.task.as_str(), run.number, worker, now, expires])
                .db()?;
            if updated == 1 {
                return Ok(expires);
            }
            check_run_held(conn, &run, &worker)?;
            Err(run_lost(&run, &worker))
        })
    }

    fn finish_run<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let run = run.clone();
        let worker = worker.to_string();
        self.write_observed(
            move |conn, now| {
                let result = json_text(result.as_ref())?;
                check_run_held(conn, &run, &worker)?;
                check_finish(task_status(conn, &run.task)?, to)?;
                close_open_runs(conn, &run.task, status_name(to), now)?;
                set_status(conn, &run.task, to, result.as_deref(), now)
            },
            |observers, (task, event)| {
                observers.events(&event);
                task
            },
        )
    }

    fn requeue_expired(&self) -> BoxFuture<'_, Result<Vec<Requeued>, StoreError>> {
        self.write_observed(
            |conn, now| {
                let expired: Vec<(String, i64)> = {
                    let mut statement = conn
                    .prepare_cached(
                        "SELECT r.task_id, r.number FROM runs r JOIN tasks t ON t.id = r.task_id
                         WHERE r.ended_at_ms IS NULL AND r.lease_expires_at_ms <= ?1
                           AND t.status IN ('running', 'testing')
                         ORDER BY r.lease_expires_at_ms",
                    )
                    .db()?;
                    let rows = statement
                        .query_map([now], |row| Ok((row.get(0)?, row.get(1)?)))
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                };
                interrupt_runs(conn, expired, now)
            },
            tell_interrupted,
        )
    }

    fn interrupt_worker_runs<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Requeued>, StoreError>> {
        let worker = worker.to_string();
        self.write_observed(
            move |conn, now| {
                let held: Vec<(String, i64)> = {
                    let mut statement = conn
                    .prepare_cached(
                        "SELECT r.task_id, r.number FROM runs r JOIN tasks t ON t.id = r.task_id
                         WHERE r.ended_at_ms IS NULL AND r.worker = ?1
                           AND t.status IN ('running', 'testing')
                         ORDER BY r.started_at_ms",
                    )
                    .db()?;
                    let rows = statement
                        .query_map([worker], |row| Ok((row.get(0)?, row.get(1)?)))
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                };
                interrupt_runs(conn, held, now)
            },
            tell_interrupted,
        )
    }

    fn pin_task_repos<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        repos: Vec<TaskRepo>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let run = run.clone();
        let worker = worker.to_string();
        self.write(move |conn, now| {
            check_run_held(conn, &run, &worker)?;
            let task = require_task(conn, &run.task)?;
            check_pinned_repos(&task.repos, &repos)?;
            conn.prepare_cached(&format!(
                "UPDATE tasks SET repos = ?2, updated_at_ms = ?3 WHERE id = ?1
                 RETURNING {TASK_COLUMNS}"
            ))
            .db()?
            .query_row(
                params![run.task.as_str(), serde_json::to_string(&repos)?, now],
                read_task,
            )
            .db()?
            .decode()
        })
    }

    fn list_runs<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Vec<Run>, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE task_id = ?1 ORDER BY number"
                ))
                .db()?;
            let rows = statement.query_map([task.as_str()], read_run).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let run = run.clone();
        self.write(move |conn, _| {
            let ended: Option<Option<i64>> = conn
                .prepare_cached("SELECT ended_at_ms FROM runs WHERE task_id = ?1 AND number = ?2")
                .db()?
                .query_row(params![run.task.as_str(), run.number], |row| row.get(0))
                .optional()
                .db()?;
            check_journal_run(&run, &entry, ended)?;
            let tail: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT seq, hash FROM journal WHERE task_id = ?1 AND run_number = ?2
                     ORDER BY seq DESC LIMIT 1",
                )
                .db()?
                .query_row(params![run.task.as_str(), run.number], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()
                .db()?;
            check_journal_append(&run, &entry, tail)?;
            insert_journal(conn, &run.task, i64::from(run.number), &entry)
        })
    }

    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        let run = run.clone();
        self.write(move |conn, _| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal WHERE task_id = ?1 AND run_number = ?2
                     ORDER BY seq"
                ))
                .db()?;
            let rows = statement
                .query_map(params![run.task.as_str(), run.number], read_journal)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn journal_page<'a>(
        &'a self,
        run: &'a RunRef,
        from: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        let run = run.clone();
        // Past i64 there is no record: an empty page.
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        self.write(move |conn, _| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal
                     WHERE task_id = ?1 AND run_number = ?2 AND seq >= ?3
                     ORDER BY seq LIMIT ?4"
                ))
                .db()?;
            let rows = statement
                .query_map(
                    params![run.task.as_str(), run.number, from, limit],
                    read_journal,
                )
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>> {
        let task = task.clone();
        self.write_observed(
            move |conn, now| {
                task_status(conn, &task)?;
                insert_event(conn, &task, event, now)
            },
            |observers, record| {
                observers.events([&record]);
                record
            },
        )
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        let stream = stream.clone();
        self.read(move |conn| {
            let after = to_i64(after)?;
            let raws: Vec<RawEvent> = match &stream {
                EventStream::Task(task) => {
                    let mut statement = conn
                        .prepare_cached(&format!(
                            "SELECT {EVENT_COLUMNS} FROM events
                             WHERE task_id = ?1 AND task_seq > ?2 ORDER BY task_seq LIMIT ?3"
                        ))
                        .db()?;
                    let rows = statement
                        .query_map(params![task.as_str(), after, limit], read_event)
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                }
                EventStream::All => {
                    let mut statement = conn
                        .prepare_cached(&format!(
                            "SELECT {EVENT_COLUMNS} FROM events WHERE seq > ?1
                             ORDER BY seq LIMIT ?2"
                        ))
                        .db()?;
                    let rows = statement
                        .query_map(params![after, limit], read_event)
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                }
            };
            raws.into_iter().map(RawEvent::decode).collect()
        })
    }

    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        self.write_observed(
            move |conn, now| {
                task_status(conn, &entry.task)?;
                conn.prepare_cached(
                    "INSERT INTO usage_ledger (task_id, run_number, model, input_tokens,
                     cached_input_tokens, output_tokens, cost_micro_usd, at_ms, role)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .db()?
                .execute(params![
                    entry.task.as_str(),
                    entry.run_number,
                    entry.model,
                    to_i64(entry.input_tokens)?,
                    to_i64(entry.cached_input_tokens)?,
                    to_i64(entry.output_tokens)?,
                    entry.cost_micro_usd.map(to_i64).transpose()?,
                    now,
                    entry.role,
                ])
                .db()?;
                Ok(entry)
            },
            |observers, entry| observers.usage(&entry),
        )
    }

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let sums = conn
                .prepare_cached(&format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE task_id = ?1"
                ))
                .db()?
                .query_row([task.as_str()], read_spend)
                .db()?;
            spend_from(sums)
        })
    }

    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>> {
        self.read(move |conn| {
            let sums = conn
                .prepare_cached(&format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE at_ms >= ?1 AND at_ms < ?2"
                ))
                .db()?
                .query_row(params![day.start_ms(), day.end_ms()], read_spend)
                .db()?;
            spend_from(sums)
        })
    }

    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>> {
        self.write(move |conn, now| {
            if load_repo(conn, &repo.name)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "repository",
                    id: repo.name,
                });
            }
            conn.prepare_cached(
                "INSERT INTO repos (name, source, branch, checks, created_by, created_at_ms,
                                    mounts, prepare)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .db()?
            .execute(params![
                repo.name,
                repo.source,
                repo.branch,
                serde_json::to_string(&repo.checks)?,
                repo.created_by,
                now,
                serde_json::to_string(&repo.mounts)?,
                serde_json::to_string(&repo.prepare)?
            ])
            .db()?;
            load_repo(conn, &repo.name)?.ok_or_else(|| not_found("repository", &repo.name))
        })
    }

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>> {
        let name = name.to_string();
        self.read(move |conn| load_repo(conn, &name))
    }

    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!("SELECT {REPO_COLUMNS} FROM repos ORDER BY name"))
                .db()?;
            let rows = statement.query_map([], read_repo).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn create_approval(
        &self,
        approval: NewApproval,
    ) -> BoxFuture<'_, Result<Approval, StoreError>> {
        self.write(move |conn, now| {
            task_status(conn, &approval.task)?;
            if load_approval(conn, &approval.id)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "approval",
                    id: approval.id,
                });
            }
            let created = conn
                .prepare_cached(&format!(
                    "INSERT INTO approvals (id, task_id, kind, subject_hash, status, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, 'pending', ?5) RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![
                        approval.id,
                        approval.task.as_str(),
                        approval.kind,
                        approval.subject_hash,
                        now
                    ],
                    read_approval,
                )
                .db()?
                .decode()?;
            Ok(created)
        })
    }

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        let id = id.to_string();
        self.read(move |conn| load_approval(conn, &id))
    }

    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>> {
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE (?1 IS NULL OR status = ?1)
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement
                .query_map([status.map(ApprovalStatus::as_str)], read_approval)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        let id = id.to_string();
        let subject_hash = subject_hash.to_string();
        let decided_by = decided_by.to_string();
        self.write(move |conn, now| {
            let approval = load_approval(conn, &id)?.ok_or_else(|| not_found("approval", &id))?;
            check_approval(&approval, &subject_hash, ApprovalStatus::Pending)?;
            let to = decided_status(decision);
            let decided = conn
                .prepare_cached(&format!(
                    "UPDATE approvals SET status = ?2, decided_by = ?3, decided_at_ms = ?4
                     WHERE id = ?1 RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, to.as_str(), decided_by, now], read_approval)
                .db()?
                .decode()?;
            Ok(decided)
        })
    }

    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        let id = id.to_string();
        let subject_hash = subject_hash.to_string();
        self.write(move |conn, now| {
            let approval = load_approval(conn, &id)?.ok_or_else(|| not_found("approval", &id))?;
            check_approval(&approval, &subject_hash, ApprovalStatus::Approved)?;
            let consumed = conn
                .prepare_cached(&format!(
                    "UPDATE approvals SET status = 'consumed', consumed_at_ms = ?2
                     WHERE id = ?1 RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, now], read_approval)
                .db()?
                .decode()?;
            Ok(consumed)
        })
    }

    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>> {
        self.write(move |conn, now| {
            task_status(conn, &intent.task)?;
            if load_intent(conn, &intent.id)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "outbox intent",
                    id: intent.id,
                });
            }
            let created = conn
                .prepare_cached(&format!(
                    "INSERT INTO outbox (id, task_id, kind, payload, status, attempts,
                         next_attempt_at_ms, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?5) RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![
                        intent.id,
                        intent.task.as_str(),
                        intent.kind,
                        serde_json::to_string(&intent.payload)?,
                        now
                    ],
                    read_intent,
                )
                .db()?
                .decode()?;
            Ok(created)
        })
    }

    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>> {
        let worker = worker.to_string();
        let lease_ms = duration_ms(lease);
        // A JSON array, so any kind name matches exactly (no separator to escape).
        let kinds = serde_json::Value::from(kinds.to_vec()).to_string();
        self.write(move |conn, now| {
            let claimed = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET lease_owner = ?2, lease_expires_at_ms = ?3,
                         attempts = attempts + 1
                     WHERE id = (
                         SELECT id FROM outbox
                         WHERE status = 'pending' AND next_attempt_at_ms <= ?1
                           AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?1)
                           AND kind IN (SELECT value FROM json_each(?4))
                         ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT 1)
                     RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![now, worker, now.saturating_add(lease_ms), kinds],
                    read_intent,
                )
                .optional()
                .db()?
                .map(RawIntent::decode)
                .transpose()?;
            Ok(claimed)
        })
    }

    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        let id = id.to_string();
        let worker = worker.to_string();
        self.write(move |conn, now| {
            held_intent(conn, &id, &worker)?;
            let done = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET status = 'done', done_at_ms = ?2, lease_expires_at_ms = NULL
                     WHERE id = ?1 RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, now], read_intent)
                .db()?
                .decode()?;
            Ok(done)
        })
    }

    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        let id = id.to_string();
        let worker = worker.to_string();
        let error = error.to_string();
        self.write(move |conn, _| {
            let intent = held_intent(conn, &id, &worker)?;
            let (status, next) = crate::checks::intent_failure(&intent, retry_at_ms);
            let failed = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET status = ?2, next_attempt_at_ms = ?3, last_error = ?4,
                         lease_owner = NULL, lease_expires_at_ms = NULL
                     WHERE id = ?1 RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, status.as_str(), next, error], read_intent)
                .db()?
                .decode()?;
            Ok(failed)
        })
    }

    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {INTENT_COLUMNS} FROM outbox WHERE task_id = ?1
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement.query_map([task.as_str()], read_intent).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>> {
        self.write(move |conn, now| {
            let taken = conn
                .prepare_cached("SELECT 1 FROM api_tokens WHERE id = ?1 OR digest = ?2")
                .db()?
                .exists(params![token.id, token.digest])
                .db()?;
            if taken {
                return Err(StoreError::AlreadyExists {
                    what: "api token",
                    id: token.id,
                });
            }
            conn.prepare_cached(&format!(
                "INSERT INTO api_tokens (id, name, role, digest, created_by, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING {API_TOKEN_COLUMNS}"
            ))
            .db()?
            .query_row(
                params![
                    token.id,
                    token.name,
                    token.role,
                    token.digest,
                    token.created_by,
                    now
                ],
                read_api_token,
            )
            .db()
            .map(RawApiToken::decode)
        })
    }

    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>> {
        let digest = digest.to_string();
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens
                     WHERE digest = ?1 AND revoked_at_ms IS NULL"
                ))
                .db()?
                .query_row([digest], read_api_token)
                .optional()
                .db()?
                .map(RawApiToken::decode))
        })
    }

    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement.query_map([], read_api_token).db()?;
            rows.map(|row| Ok(row.db()?.decode())).collect()
        })
    }

    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(&format!(
                "UPDATE api_tokens SET revoked_at_ms = COALESCE(revoked_at_ms, ?2)
                 WHERE id = ?1 RETURNING {API_TOKEN_COLUMNS}"
            ))
            .db()?
            .query_row(params![id, now], read_api_token)
            .optional()
            .db()?
            .map(RawApiToken::decode)
            .ok_or_else(|| not_found("api token", &id))
        })
    }

    fn put_web_user<'a>(
        &'a self,
        name: &'a str,
        role: &'a str,
        password_hash: &'a str,
    ) -> BoxFuture<'a, Result<WebUser, StoreError>> {
        let (name, role, hash) = (
            name.to_string(),
            role.to_string(),
            password_hash.to_string(),
        );
        self.write(move |conn, now| {
            let user = conn
                .prepare_cached(&format!(
                    "INSERT INTO web_users (name, role, password_hash, created_at_ms, updated_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?4)
                     ON CONFLICT (name) DO UPDATE SET role = excluded.role,
                         password_hash = excluded.password_hash,
                         updated_at_ms = excluded.updated_at_ms
                     RETURNING {WEB_USER_COLUMNS}"
                ))
                .db()?
                .query_row(params![name, role, hash, now], read_web_user)
                .db()?;
            revoke_password_sessions(conn, &name, now)?;
            Ok(user)
        })
    }

    fn find_web_user<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebUser>, StoreError>> {
        let name = name.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {WEB_USER_COLUMNS} FROM web_users WHERE name = ?1"
            ))
            .db()?
            .query_row([name], read_web_user)
            .optional()
            .db()
        })
    }

    fn list_web_users(&self) -> BoxFuture<'_, Result<Vec<WebUser>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {WEB_USER_COLUMNS} FROM web_users ORDER BY name"
                ))
                .db()?;
            let rows = statement.query_map([], read_web_user).db()?;
            rows.map(|row| row.db()).collect()
        })
    }

    fn delete_web_user<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let name = name.to_string();
        self.write(move |conn, now| {
            let deleted = conn
                .prepare_cached("DELETE FROM web_users WHERE name = ?1")
                .db()?
                .execute([&name])
                .db()?;
            if deleted == 0 {
                return Err(not_found("web user", &name));
            }
            revoke_password_sessions(conn, &name, now)
        })
    }

    fn create_web_session(
        &self,
        session: NewWebSession,
    ) -> BoxFuture<'_, Result<WebSession, StoreError>> {
        self.write(move |conn, now| {
            conn.prepare_cached(
                "DELETE FROM web_sessions WHERE expires_at_ms < ?1 OR revoked_at_ms < ?1",
            )
            .db()?
            .execute([now.saturating_sub(WEB_SESSION_RETENTION_MS)])
            .db()?;
            let taken = conn
                .prepare_cached("SELECT 1 FROM web_sessions WHERE id = ?1 OR digest = ?2")
                .db()?
                .exists(params![session.id, session.digest])
                .db()?;
            if taken {
                return Err(StoreError::AlreadyExists {
                    what: "web session",
                    id: session.id,
                });
            }
            let expires = now.saturating_add(duration_ms(session.lifetime));
            conn.prepare_cached(&format!(
                "INSERT INTO web_sessions (id, digest, name, role_at_sign_in, credential, address,
                     user_agent, created_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING {WEB_SESSION_COLUMNS}"
            ))
            .db()?
            .query_row(
                params![
                    session.id,
                    session.digest,
                    session.name,
                    session.role_at_sign_in,
                    session.credential,
                    session.address,
                    session.user_agent,
                    now,
                    expires
                ],
                read_web_session,
            )
            .db()
        })
    }

    fn find_web_session<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebSession>, StoreError>> {
        let digest = digest.to_string();
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                 WHERE digest = ?1 AND revoked_at_ms IS NULL AND expires_at_ms > ?2"
            ))
            .db()?
            .query_row(params![digest, now], read_web_session)
            .optional()
            .db()
        })
    }

    fn list_web_sessions<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<WebSession>, StoreError>> {
        let name = name.map(str::to_string);
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE revoked_at_ms IS NULL AND expires_at_ms > ?1
                         AND (?2 IS NULL OR name = ?2)
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement
                .query_map(params![now, name], read_web_session)
                .db()?;
            rows.map(|row| row.db()).collect()
        })
    }

    fn revoke_web_session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<WebSession, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(&format!(
                "UPDATE web_sessions SET revoked_at_ms = COALESCE(revoked_at_ms, ?2)
                 WHERE id = ?1 RETURNING {WEB_SESSION_COLUMNS}"
            ))
            .db()?
            .query_row(params![id, now], read_web_session)
            .optional()
            .db()?
            .ok_or_else(|| not_found("web session", &id))
        })
    }

    fn record_chat_update<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
        replies: Vec<NewChatMessage>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let channel = channel.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(
                "INSERT INTO chat_offsets (channel, next_offset, updated_at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (channel) DO UPDATE SET
                     next_offset = MAX(next_offset, excluded.next_offset),
                     updated_at_ms = excluded.updated_at_ms",
            )
            .db()?
            .execute(params![channel, update_id.saturating_add(1), now])
            .db()?;
            let new = conn
                .prepare_cached(
                    "INSERT INTO chat_updates (channel, update_id, handled_at_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                )
                .db()?
                .execute(params![channel, update_id, now])
                .db()?;
            if new == 0 {
                return Ok(false);
            }
            for reply in replies {
                insert_chat_message(conn, &reply, now)?;
            }
            Ok(true)
        })
    }

    fn chat_update_seen<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let channel = channel.to_string();
        self.read(move |conn| {
            conn.prepare_cached("SELECT 1 FROM chat_updates WHERE channel = ?1 AND update_id = ?2")
                .db()?
                .query_row(params![channel, update_id], |_| Ok(()))
                .optional()
                .db()
                .map(|found| found.is_some())
        })
    }

    fn chat_offset<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        let channel = channel.to_string();
        self.read(move |conn| {
            conn.prepare_cached("SELECT next_offset FROM chat_offsets WHERE channel = ?1")
                .db()?
                .query_row([channel], |row| row.get(0))
                .optional()
                .db()
        })
    }

    fn put_chat_message(
        &self,
        message: NewChatMessage,
    ) -> BoxFuture<'_, Result<ChatMessage, StoreError>> {
        self.write(move |conn, now| {
            insert_chat_message(conn, &message, now)?;
            conn.prepare_cached(
                "UPDATE chat_messages SET text = ?2, markup = ?3, revision = revision + 1,
                     next_attempt_at_ms = MIN(next_attempt_at_ms, ?4), updated_at_ms = ?4
                 WHERE id = ?1 AND (text IS NOT ?2 OR markup IS NOT ?3) AND state != 'failed'",
            )
            .db()?
            .execute(params![message.id, message.text, message.markup, now])
            .db()?;
            load_chat_message(conn, &message.id)?
                .ok_or_else(|| not_found("chat message", &message.id))
        })
    }

    fn get_chat_message<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatMessage>, StoreError>> {
        let id = id.to_string();
        self.read(move |conn| load_chat_message(conn, &id))
    }

    fn due_chat_messages<'a>(
        &'a self,
        channel: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatMessage>, StoreError>> {
        let channel = channel.to_string();
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages
                     WHERE channel = ?1 AND next_attempt_at_ms <= ?2
                       AND (state IN ('pending', 'sending')
                            OR (state = 'sent' AND revision > delivered_revision))
                     ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT ?3"
                ))
                .db()?;
            let rows = statement
                .query_map(params![channel, now, limit], read_chat_message)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn start_chat_send<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            let updated = conn
                .prepare_cached(
                    "UPDATE chat_messages SET state = 'sending', attempts = attempts + 1,
                         updated_at_ms = ?2
                     WHERE id = ?1 AND state IN ('pending', 'sending')",
                )
                .db()?
                .execute(params![id, now])
                .db()?;
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            if updated == 0 {
                return Err(StoreError::InvalidData(format!(
                    "chat message {id} is {}, not waiting to be sent",
                    message.state.as_str()
                )));
            }
            Ok(message)
        })
    }

    fn chat_message_delivered<'a>(
        &'a self,
        id: &'a str,
        message_id: &'a str,
        revision: i64,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let (id, message_id) = (id.to_string(), message_id.to_string());
        self.write(move |conn, now| {
            let updated = conn
                .prepare_cached(
                    "UPDATE chat_messages SET state = 'sent', message_id = ?2,
                         delivered_revision = MAX(delivered_revision, ?3), attempts = 0,
                         last_error = NULL, updated_at_ms = ?4
                     WHERE id = ?1 AND state != 'failed'",
                )
                .db()?
                .execute(params![id, message_id, revision, now])
                .db()?;
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            if updated == 0 {
                return Err(StoreError::InvalidData(format!(
                    "chat message {id} was given up on"
                )));
            }
            Ok(message)
        })
    }

    fn chat_message_failed<'a>(
        &'a self,
        id: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let (id, error) = (id.to_string(), error.to_string());
        self.write(move |conn, now| {
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            let (state, next, delivered) = crate::checks::chat_failure(&message, retry_at_ms);
            conn.prepare_cached(
                "UPDATE chat_messages SET state = ?2, next_attempt_at_ms = ?3,
                     delivered_revision = ?4, last_error = ?5, updated_at_ms = ?6
                 WHERE id = ?1",
            )
            .db()?
            .execute(params![id, state.as_str(), next, delivered, error, now])
            .db()?;
            load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))
        })
    }

    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>> {
        let task = task.clone();
        let (role, text, author) = (role.to_string(), text.to_string(), author.to_string());
        self.write(move |conn, now| {
            task_status(conn, &task)?;
            insert_message(conn, &task, &role, &text, &author, now)
        })
    }

    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE task_id = ?1 ORDER BY seq"
                ))
                .db()?;
            let rows = statement.query_map([task.as_str()], read_message).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let task = task.clone();
        let (text, author) = (text.to_string(), author.to_string());
        self.write_observed(
            move |conn, now| {
                check_status(&task, TaskStatus::WaitingInput, task_status(conn, &task)?)?;
                insert_message(conn, &task, MESSAGE_USER, &text, &author, now)?;
                close_open_runs(conn, &task, status_name(TaskStatus::Queued), now)?;
                set_status(conn, &task, TaskStatus::Queued, None, now)
            },
            |observers, (task, event)| {
                observers.events(&event);
                task
            },
        )
    }

    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>> {
        self.read(move |conn| {
            // Floor division, so an instant before 1970 still lands on its own day.
            let day = format!(
                "(at_ms - (((at_ms % {MS_PER_DAY}) + {MS_PER_DAY}) % {MS_PER_DAY})) / {MS_PER_DAY}"
            );
            let by_day: Vec<(i64, Spend)> = grouped_spend(
                conn,
                &format!(
                    "SELECT {day} AS day, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY day ORDER BY day"
                ),
                &query,
            )?;
            let by_task: Vec<(String, Spend)> = grouped_spend(
                conn,
                &format!(
                    "SELECT task_id, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY task_id ORDER BY task_id"
                ),
                &query,
            )?;
            let by_model = grouped_spend(
                conn,
                &format!(
                    "SELECT model, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY model ORDER BY model"
                ),
                &query,
            )?;
            let by_role = grouped_spend(
                conn,
                &format!(
                    "SELECT role, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY role ORDER BY role"
                ),
                &query,
            )?;
            Ok(UsageSummary {
                by_day: by_day
                    .into_iter()
                    .map(|(day, spend)| (UtcDay(day), spend))
                    .collect(),
                by_task: by_task
                    .into_iter()
                    .map(|(id, spend)| Ok((crate::rows::task_id(id)?, spend)))
                    .collect::<Result<_, StoreError>>()?,
                by_model,
                by_role,
            })
        })
    }

    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached("SELECT status, COUNT(*) FROM tasks GROUP BY status")
                .db()?;
            let rows = statement
                .query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })
                .db()?;
            let mut counted = Vec::new();
            for row in rows {
                let (name, count) = row.db()?;
                counted.push((status(&name)?, to_u64(count)?));
            }
            Ok(ALL_STATUSES
                .into_iter()
                .map(|s| {
                    let n = counted.iter().find(|(c, _)| *c == s).map_or(0, |(_, n)| *n);
                    (s, n)
                })
                .collect())
        })
    }
}
