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
    announces_finish, check_approval, check_message_role, check_pinned_repos, event_record,
    finished_event, json_text, name_list, spend_from, status, to_i64, to_u32, to_u64, RawApiToken,
    RawApproval, RawChatMessage, RawEvent, RawIntent, RawJournal, RawMessage, RawRepo, RawRun,
    RawTask, RawWebSession, RawWebUser, API_TOKEN_COLUMNS, APPROVAL_COLUMNS, CHAT_MESSAGE_COLUMNS,
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
            "SELECT COALESCE(MAX(version), 0) AS version FROM schema_version",
            [],
            |row| row.get("version"),
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
        id: row.get("id")?,
        kind: row.get("kind")?,
        status: row.get("status")?,
        owner: row.get("owner")?,
        prompt: row.get("prompt")?,
        repos: row.get("repos")?,
        priority: row.get("priority")?,
        created_at_ms: row.get("created_at_ms")?,
        updated_at_ms: row.get("updated_at_ms")?,
        follow_up_to: row.get("follow_up_to")?,
        retry_of: row.get("retry_of")?,
        result: row.get("result")?,
        metadata: row.get("metadata")?,
        run_count: row.get("run_count")?,
        interrupted_runs: row.get("interrupted_runs")?,
        callback_url: row.get("callback_url")?,
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
        .query_row([id.as_str()], |row| row.get("status"))
        .optional()
        .db()?;
    status(&name.ok_or_else(|| not_found("task", id.as_str()))?)
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
    if !announces_finish(to) {
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
            Ok((row.get("seq")?, row.get("task_seq")?))
        })
        .db()?;
    event_record(task, seq, task_seq, now, event)
}

/// Sums over ledger entries, named as [`read_spend`] reads them.
const SPEND_COLUMNS: &str = "COALESCE(SUM(input_tokens), 0) AS sum_input_tokens, \
     COALESCE(SUM(cached_input_tokens), 0) AS sum_cached_input_tokens, \
     COALESCE(SUM(output_tokens), 0) AS sum_output_tokens, \
     COALESCE(SUM(cost_micro_usd), 0) AS sum_cost_micro_usd, \
     COUNT(*) - COUNT(cost_micro_usd) AS unknown_costs, COUNT(*) AS entries";

/// The sums of [`SPEND_COLUMNS`], in [`crate::rows::spend_from`]'s order.
fn read_spend(row: &Row<'_>) -> rusqlite::Result<[i64; 6]> {
    Ok([
        row.get("sum_input_tokens")?,
        row.get("sum_cached_input_tokens")?,
        row.get("sum_output_tokens")?,
        row.get("sum_cost_micro_usd")?,
        row.get("unknown_costs")?,
        row.get("entries")?,
    ])
}

mod approvals;
mod chat;
mod conversation;
mod events;
mod journal_records;
mod ledger;
mod outbox;
mod queue;
mod reports;
mod repos;
mod tasks;
mod tokens;
mod web;

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
}
