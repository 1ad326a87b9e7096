//! The Postgres backend, for many workers on many machines sharing one database: a pool of
//! `tokio-postgres` connections (prepared statements cached per connection), READ COMMITTED
//! transactions that lock what they change (`FOR UPDATE`, task row before run row), claims with
//! `FOR UPDATE SKIP LOCKED` so workers never wait on each other's candidates, and an advisory
//! lock per repository so two change tasks on one repository cannot start together.

mod schema;

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Transaction};
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};
use warden_protocol::{Event, TaskId, TaskStatus};

use crate::checks::{
    after_interruption, check_finish, check_intent_held, check_journal_append, check_journal_run,
    check_open_run, check_replay, check_retryable, check_status, check_transition, decided_status,
    intent_failure, journal_fork, not_found, run_lost, transition_ends_run,
};
use crate::clock::duration_ms;
use crate::observer::Observers;
use crate::rows::{
    announces_finish, check_approval, check_message_role, check_pinned_repos, event_record,
    finished_event, json_text, spend_from, status, to_i64, to_u32, to_u64, RawApiToken,
    RawApproval, RawChatMessage, RawEvent, RawIntent, RawJournal, RawMessage, RawRepo, RawRun,
    RawTask, RawWebSession, RawWebUser, API_TOKEN_COLUMNS, APPROVAL_COLUMNS, CHAT_MESSAGE_COLUMNS,
    EVENT_COLUMNS, INTENT_COLUMNS, JOURNAL_COLUMNS, MESSAGE_COLUMNS, MS_PER_DAY, REPO_COLUMNS,
    RUN_COLUMNS, TASK_COLUMNS, WEB_SESSION_COLUMNS, WEB_SESSION_RETENTION_MS, WEB_USER_COLUMNS,
};
use crate::state::{
    exclusive_kind_names, is_active, kind_name, status_name, transition_allowed, ALL_STATUSES,
};
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

const BACKEND: &str = "postgres";
/// Claims retried when a candidate change task turns out to collide with one that started
/// concurrently on the same repository.
const CLAIM_ATTEMPTS: usize = 8;

/// The Postgres store. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    clock: Arc<dyn Clock>,
    observers: Arc<Observers>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

type PgError = tokio_postgres::Error;
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

fn pg_error(e: PgError) -> StoreError {
    let (message, retryable) = match e.as_db_error() {
        Some(db) => {
            let code = db.code();
            let retryable = *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::LOCK_NOT_AVAILABLE
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || code.code().starts_with("08");
            (format!("{} ({})", db.message(), code.code()), retryable)
        }
        None => {
            let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
            (e.to_string(), io || e.is_closed())
        }
    };
    StoreError::Database {
        backend: BACKEND,
        message,
        retryable,
        source: Some(Box::new(e)),
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_error(e),
        deadpool_postgres::PoolError::Timeout(kind) => StoreError::Database {
            backend: BACKEND,
            message: format!("connection pool timed out ({kind:?})"),
            retryable: true,
            source: None,
        },
        other => StoreError::Database {
            backend: BACKEND,
            message: format!("connection pool: {other}"),
            retryable: false,
            source: None,
        },
    }
}

fn has_code(e: &PgError, code: &SqlState) -> bool {
    e.code() == Some(code)
}

/// Queries through the per-connection statement cache, on a pooled client or a transaction.
trait Conn: Send + Sync {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<Vec<Row>, PgError>>;
    fn exec<'a>(&'a self, sql: &'a str, params: Params<'a>) -> BoxFuture<'a, Result<u64, PgError>>;
}

impl Conn for deadpool_postgres::ClientWrapper {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<Vec<Row>, PgError>> {
        Box::pin(async move {
            let statement = self.prepare_cached(sql).await?;
            self.query(&statement, params).await
        })
    }

    fn exec<'a>(&'a self, sql: &'a str, params: Params<'a>) -> BoxFuture<'a, Result<u64, PgError>> {
        Box::pin(async move {
            let statement = self.prepare_cached(sql).await?;
            self.execute(&statement, params).await
        })
    }
}

impl Conn for Transaction<'_> {
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        params: Params<'a>,
    ) -> BoxFuture<'a, Result<Vec<Row>, PgError>> {
        Box::pin(async move {
            let statement = self.prepare_cached(sql).await?;
            self.query(&statement, params).await
        })
    }

    fn exec<'a>(&'a self, sql: &'a str, params: Params<'a>) -> BoxFuture<'a, Result<u64, PgError>> {
        Box::pin(async move {
            let statement = self.prepare_cached(sql).await?;
            self.execute(&statement, params).await
        })
    }
}

async fn query(c: &dyn Conn, sql: &str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
    c.rows(sql, params).await.map_err(pg_error)
}

async fn query_opt(c: &dyn Conn, sql: &str, params: Params<'_>) -> Result<Option<Row>, StoreError> {
    Ok(query(c, sql, params).await?.into_iter().next())
}

async fn query_one(c: &dyn Conn, sql: &str, params: Params<'_>) -> Result<Row, StoreError> {
    query_opt(c, sql, params)
        .await?
        .ok_or_else(|| StoreError::Database {
            backend: BACKEND,
            message: "query returned no row".into(),
            retryable: false,
            source: None,
        })
}

async fn execute(c: &dyn Conn, sql: &str, params: Params<'_>) -> Result<u64, StoreError> {
    c.exec(sql, params).await.map_err(pg_error)
}

/// Column `index` of `row` (a name, or a position for a one-column answer).
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: impl tokio_postgres::row::RowIndex + std::fmt::Display,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(pg_error)
}

/// A task from the columns `TASK_COLUMNS` names (the first of each name in the row).
fn read_task(row: &Row) -> Result<Task, StoreError> {
    read_task_named(row, "")
}

/// A task from the columns `TASK_COLUMNS` names, each with `prefix` (a row holding two tasks
/// names the second's columns `next_id`, `next_kind`, … with [`prefixed_task_columns`]).
fn read_task_named(row: &Row, prefix: &str) -> Result<Task, StoreError> {
    let column = |name: &str| format!("{prefix}{name}");
    RawTask {
        id: get(row, column("id").as_str())?,
        kind: get(row, column("kind").as_str())?,
        status: get(row, column("status").as_str())?,
        owner: get(row, column("owner").as_str())?,
        prompt: get(row, column("prompt").as_str())?,
        repos: get(row, column("repos").as_str())?,
        priority: get(row, column("priority").as_str())?,
        created_at_ms: get(row, column("created_at_ms").as_str())?,
        updated_at_ms: get(row, column("updated_at_ms").as_str())?,
        follow_up_to: get(row, column("follow_up_to").as_str())?,
        retry_of: get(row, column("retry_of").as_str())?,
        result: get(row, column("result").as_str())?,
        metadata: get(row, column("metadata").as_str())?,
        run_count: get(row, column("run_count").as_str())?,
        interrupted_runs: get(row, column("interrupted_runs").as_str())?,
        callback_url: get(row, column("callback_url").as_str())?,
    }
    .decode()
}

/// The task columns of `table` as `prefix` + their names (`claimed.id AS next_id, …`).
fn prefixed_task_columns(table: &str, prefix: &str) -> String {
    [
        "id",
        "kind",
        "status",
        "owner",
        "prompt",
        "repos",
        "priority",
        "created_at_ms",
        "updated_at_ms",
        "follow_up_to",
        "retry_of",
        "result",
        "metadata",
        "run_count",
        "interrupted_runs",
        "callback_url",
    ]
    .iter()
    .map(|name| format!("{table}.{name} AS {prefix}{name}"))
    .collect::<Vec<_>>()
    .join(", ")
}

fn read_run(row: &Row) -> Result<Run, StoreError> {
    RawRun {
        task_id: get(row, "task_id")?,
        number: get(row, "number")?,
        worker: get(row, "worker")?,
        started_at_ms: get(row, "started_at_ms")?,
        heartbeat_at_ms: get(row, "heartbeat_at_ms")?,
        lease_expires_at_ms: get(row, "lease_expires_at_ms")?,
        ended_at_ms: get(row, "ended_at_ms")?,
        outcome: get(row, "outcome")?,
    }
    .decode()
}

fn read_journal(row: &Row) -> Result<JournalEntry, StoreError> {
    RawJournal {
        seq: get(row, "seq")?,
        at_ms: get(row, "at_ms")?,
        kind: get(row, "kind")?,
        payload: get(row, "payload")?,
        prev_hash: get(row, "prev_hash")?,
        hash: get(row, "hash")?,
        display: get(row, "display")?,
    }
    .decode()
}

fn read_event(row: &Row) -> Result<EventRecord, StoreError> {
    RawEvent {
        seq: get(row, "seq")?,
        task_seq: get(row, "task_seq")?,
        task_id: get(row, "task_id")?,
        at_ms: get(row, "at_ms")?,
        event: get(row, "event")?,
    }
    .decode()
}

fn read_approval(row: &Row) -> Result<Approval, StoreError> {
    RawApproval {
        id: get(row, "id")?,
        task_id: get(row, "task_id")?,
        kind: get(row, "kind")?,
        subject_hash: get(row, "subject_hash")?,
        status: get(row, "status")?,
        created_at_ms: get(row, "created_at_ms")?,
        decided_by: get(row, "decided_by")?,
        decided_at_ms: get(row, "decided_at_ms")?,
        consumed_at_ms: get(row, "consumed_at_ms")?,
    }
    .decode()
}

fn read_intent(row: &Row) -> Result<Intent, StoreError> {
    RawIntent {
        id: get(row, "id")?,
        task_id: get(row, "task_id")?,
        kind: get(row, "kind")?,
        payload: get(row, "payload")?,
        status: get(row, "status")?,
        attempts: get(row, "attempts")?,
        next_attempt_at_ms: get(row, "next_attempt_at_ms")?,
        lease_owner: get(row, "lease_owner")?,
        lease_expires_at_ms: get(row, "lease_expires_at_ms")?,
        last_error: get(row, "last_error")?,
        created_at_ms: get(row, "created_at_ms")?,
        done_at_ms: get(row, "done_at_ms")?,
    }
    .decode()
}

/// `TASK_COLUMNS` qualified for an `UPDATE tasks … FROM …` that returns them.
const CLAIMED_COLUMNS: &str = "tasks.id, tasks.kind, tasks.status, tasks.owner, tasks.prompt, \
     tasks.repos, tasks.priority, tasks.created_at_ms, tasks.updated_at_ms, tasks.follow_up_to, \
     tasks.retry_of, tasks.result, tasks.metadata, tasks.run_count, tasks.interrupted_runs, \
     tasks.callback_url";

/// The common head of the `finish_runs` statements: `input` (one row per completion, `$1`–`$6`),
/// `task` (their tasks, locked in id order; NO KEY UPDATE so the foreign-key checks of a
/// concurrent `append_event`, which holds the event counter, do not wait on it) and `ended` (the runs it ended at `$7`, checked
/// against the allowed `from>to` pairs `$8`).
const END_RUNS: &str = "WITH input AS MATERIALIZED (
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[],
             $5::text[], $6::bigint[]) AS i(task_id, number, worker, status, result, ord)),
     task AS MATERIALIZED (
         SELECT id, status FROM tasks WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE),
     ended AS (
         UPDATE runs SET ended_at_ms = $7, outcome = input.status
         FROM input JOIN task ON task.id = input.task_id
         WHERE runs.task_id = input.task_id AND runs.number = input.number
           AND runs.worker = input.worker AND runs.ended_at_ms IS NULL
           AND (task.status || '>' || input.status) = ANY($8)
         RETURNING runs.task_id, input.status, input.result, input.ord)";

/// The `input` arrays of [`END_RUNS`]: the first pending completion of each task (a task has
/// one open run; a second completion of it goes through the per-row checks).
struct EndRunsInput<'a> {
    ids: Vec<&'a str>,
    numbers: Vec<i64>,
    workers: Vec<&'a str>,
    statuses: Vec<&'static str>,
    results: Vec<Option<&'a str>>,
    ords: Vec<i64>,
}

impl<'a> EndRunsInput<'a> {
    fn new(
        completions: &'a [Completion],
        results: &'a [Option<String>],
        pending: &[bool],
    ) -> Result<EndRunsInput<'a>, StoreError> {
        let mut input = EndRunsInput {
            ids: Vec::new(),
            numbers: Vec::new(),
            workers: Vec::new(),
            statuses: Vec::new(),
            results: Vec::new(),
            ords: Vec::new(),
        };
        let mut tasks = std::collections::HashSet::new();
        for (i, ((completion, result), pending)) in
            completions.iter().zip(results).zip(pending).enumerate()
        {
            if *pending && tasks.insert(completion.run.task.as_str()) {
                input.ids.push(completion.run.task.as_str());
                input.numbers.push(i64::from(completion.run.number));
                input.workers.push(completion.worker.as_str());
                input.statuses.push(status_name(completion.status));
                input.results.push(result.as_deref());
                input.ords.push(to_i64(i as u64)?);
            }
        }
        Ok(input)
    }
}

/// A run [`end_runs`] ended: its task as stored, and the events `set_status` stored with it
/// (`None` when the statement ended it: the terminal event is still to be written).
struct EndedRun {
    task: Task,
    to: TaskStatus,
    stored: Option<Vec<EventRecord>>,
}

/// A run [`end_runs`] ended, or why not.
type Ended = Result<EndedRun, StoreError>;

/// `from>to` pairs a completion may apply (to a status that is not active).
fn finish_transitions() -> Vec<String> {
    let mut pairs = Vec::new();
    for from in ALL_STATUSES {
        for to in ALL_STATUSES {
            if !is_active(to) && transition_allowed(from, to) {
                pairs.push(format!("{}>{}", status_name(from), status_name(to)));
            }
        }
    }
    pairs
}

/// Ends the completions' runs inside `tx`, each exactly as `finish_run` does: one statement
/// locks the tasks (in id order), ends every run that is open and the completion's worker's
/// whose task may move to the completion's status, and moves those tasks. A completion it did
/// not apply (a lost lease, a status that does not allow it, a second completion of a task)
/// then goes through `finish_run`'s checks one by one, which name the reason (or apply it).
async fn end_runs(
    tx: &Transaction<'_>,
    completions: Vec<Completion>,
    now: i64,
) -> Result<Vec<Ended>, StoreError> {
    let mut results = Vec::with_capacity(completions.len());
    let mut outcomes: Vec<Option<Result<Task, StoreError>>> = Vec::new();
    for completion in &completions {
        match json_text(completion.result.as_ref()) {
            Ok(result) => {
                results.push(result);
                outcomes.push(None);
            }
            Err(error) => {
                results.push(None);
                outcomes.push(Some(Err(error)));
            }
        }
    }
    let pending: Vec<bool> = outcomes.iter().map(Option::is_none).collect();
    let input = EndRunsInput::new(&completions, &results, &pending)?;
    let rows = query(
        tx,
        &format!(
            "{END_RUNS}
             UPDATE tasks SET status = ended.status, result = COALESCE(ended.result, tasks.result),
                 updated_at_ms = $7
             FROM ended WHERE tasks.id = ended.task_id
             RETURNING ended.ord, {CLAIMED_COLUMNS}"
        ),
        &[
            &input.ids,
            &input.numbers,
            &input.workers,
            &input.statuses,
            &input.results,
            &input.ords,
            &now,
            &finish_transitions(),
        ],
    )
    .await?;
    for row in &rows {
        let ord: i64 = get(row, "ord")?;
        let slot = usize::try_from(ord)
            .ok()
            .and_then(|i| outcomes.get_mut(i))
            .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown row"))?;
        *slot = Some(Ok(read_task(row)?));
    }
    let mut ended = Vec::with_capacity(completions.len());
    for ((completion, outcome), result) in completions.into_iter().zip(outcomes).zip(results) {
        let to = completion.status;
        let outcome = match outcome {
            Some(outcome) => outcome.map(|task| EndedRun {
                task,
                to,
                stored: None,
            }),
            None => match finish_checked(tx, &completion, result.as_deref(), now).await {
                Err(error @ StoreError::Database { .. }) => return Err(error),
                outcome => outcome.map(|(task, stored)| EndedRun {
                    task,
                    to,
                    stored: Some(stored),
                }),
            },
        };
        ended.push(outcome);
    }
    Ok(ended)
}

/// `finish_run`'s transaction body for one completion inside `tx`; also the events it stored.
async fn finish_checked(
    tx: &Transaction<'_>,
    completion: &Completion,
    result: Option<&str>,
    now: i64,
) -> Result<(Task, Vec<EventRecord>), StoreError> {
    let (run, to) = (&completion.run, completion.status);
    // Task row first, then run row: the order every writer uses. NO KEY UPDATE, not UPDATE:
    // `append_event` takes the event counter and then (its foreign key) a KEY SHARE lock on
    // the task, while this transaction takes the counter after the task.
    let row = query_opt(
        tx,
        "SELECT status FROM tasks WHERE id = $1 FOR NO KEY UPDATE",
        &[&run.task.as_str()],
    )
    .await?
    .ok_or_else(|| not_found("task", run.task.as_str()))?;
    let from = status(&get::<String>(&row, 0)?)?;
    check_run_held(tx, run, &completion.worker).await?;
    check_finish(from, to)?;
    close_open_runs(tx, &run.task, status_name(to), now).await?;
    let (task, event) = set_status(tx, &run.task, to, result, now).await?;
    Ok((task, event.into_iter().collect()))
}

async fn load_task(c: &dyn Conn, id: &str) -> Result<Option<Task>, StoreError> {
    query_opt(
        c,
        &format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(read_task)
    .transpose()
}

/// The task's status, row-locked until the transaction ends. `FOR NO KEY UPDATE`, not `FOR
/// UPDATE`: an event append holds the event counter and then takes a key-share lock on the task
/// row through its foreign key, so a full row lock taken before the counter would deadlock
/// with it.
async fn lock_task_status(tx: &Transaction<'_>, id: &TaskId) -> Result<TaskStatus, StoreError> {
    let row = query_opt(
        tx,
        "SELECT status FROM tasks WHERE id = $1 FOR NO KEY UPDATE",
        &[&id.as_str()],
    )
    .await?
    .ok_or_else(|| not_found("task", id.as_str()))?;
    status(&get::<String>(&row, 0)?)
}

async fn require_task_exists(c: &dyn Conn, id: &TaskId) -> Result<TaskStatus, StoreError> {
    let row = query_opt(c, "SELECT status FROM tasks WHERE id = $1", &[&id.as_str()])
        .await?
        .ok_or_else(|| not_found("task", id.as_str()))?;
    status(&get::<String>(&row, 0)?)
}

async fn close_open_runs(
    c: &dyn Conn,
    id: &TaskId,
    outcome: &str,
    now: i64,
) -> Result<(), StoreError> {
    execute(
        c,
        "UPDATE runs SET ended_at_ms = $2, outcome = $3 WHERE task_id = $1 AND ended_at_ms IS NULL",
        &[&id.as_str(), &now, &outcome],
    )
    .await?;
    Ok(())
}

/// Stores one journal record of run `number` of `task` (its chain was checked by the caller).
/// The inner result is the database's as it is, so a caller can tell a duplicate sequence
/// number (a fork) from other failures.
async fn insert_journal(
    c: &dyn Conn,
    task: &TaskId,
    number: i64,
    entry: &crate::journal::JournalEntry,
) -> Result<Result<u64, PgError>, StoreError> {
    let payload = serde_json::to_string(&entry.payload)?;
    let (seq, at_ms) = (to_i64(entry.seq)?, to_i64(entry.at_ms)?);
    Ok(c.exec(
        "INSERT INTO journal (task_id, run_number, seq, at_ms, kind, payload, prev_hash, hash,
                              display)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &task.as_str(),
            &number,
            &seq,
            &at_ms,
            &entry.kind,
            &payload,
            &entry.prev_hash,
            &entry.hash,
            &entry.display,
        ],
    )
    .await)
}

/// Moves the task to `to` (inside the caller's transaction); a terminal `to` stores its
/// `task_finished` event with it (returned, for the observers once the transaction commits).
async fn set_status(
    c: &dyn Conn,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(Task, Option<EventRecord>), StoreError> {
    let row = query_one(
        c,
        &format!(
            "UPDATE tasks SET status = $2, result = COALESCE($3, result), updated_at_ms = $4
             WHERE id = $1 RETURNING {TASK_COLUMNS}"
        ),
        &[&id.as_str(), &status_name(to), &result, &now],
    )
    .await?;
    let task = read_task(&row)?;
    if !announces_finish(to) {
        return Ok((task, None));
    }
    let record = insert_event(c, id, finished_event(to, task.result.as_ref()), now).await?;
    Ok((task, Some(record)))
}

/// Appends one event to the task's stream inside the caller's transaction, numbered.
async fn insert_event(
    c: &dyn Conn,
    task: &TaskId,
    event: Event,
    now: i64,
) -> Result<EventRecord, StoreError> {
    // Serialised before the event counter's row lock is taken.
    let text = serde_json::to_string(&event)?;
    let counter = query_one(
        c,
        "UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value",
        &[],
    )
    .await?;
    let seq: i64 = get(&counter, 0)?;
    // A new statement, so its snapshot includes every event committed before we took the
    // counter lock.
    let row = query_one(
        c,
        "INSERT INTO events (seq, task_id, task_seq, at_ms, event)
         VALUES ($1, $2, (SELECT COALESCE(MAX(task_seq), 0) + 1 FROM events WHERE task_id = $2),
                 $3, $4)
         RETURNING task_seq",
        &[&seq, &task.as_str(), &now, &text],
    )
    .await?;
    event_record(task, seq, get(&row, 0)?, now, event)
}

/// Locks the run row; fails unless it is open and `worker`'s.
async fn check_run_held(c: &dyn Conn, run: &RunRef, worker: &str) -> Result<(), StoreError> {
    let number = i64::from(run.number);
    let row = query_opt(
        c,
        "SELECT worker, ended_at_ms FROM runs WHERE task_id = $1 AND number = $2 FOR UPDATE",
        &[&run.task.as_str(), &number],
    )
    .await?
    .map(|row| Ok::<_, StoreError>((get(&row, "worker")?, get(&row, "ended_at_ms")?)))
    .transpose()?;
    crate::checks::check_run_held(run, worker, row)
}

/// Sums over ledger entries, named as [`read_spend`] reads them.
const SPEND_COLUMNS: &str = "COALESCE(SUM(input_tokens), 0)::BIGINT AS sum_input_tokens, \
     COALESCE(SUM(cached_input_tokens), 0)::BIGINT AS sum_cached_input_tokens, \
     COALESCE(SUM(output_tokens), 0)::BIGINT AS sum_output_tokens, \
     COALESCE(SUM(cost_micro_usd), 0)::BIGINT AS sum_cost_micro_usd, \
     COUNT(*) - COUNT(cost_micro_usd) AS unknown_costs, COUNT(*) AS entries";

/// The sums of [`SPEND_COLUMNS`].
fn read_spend(row: &Row) -> Result<Spend, StoreError> {
    spend_from([
        get(row, "sum_input_tokens")?,
        get(row, "sum_cached_input_tokens")?,
        get(row, "sum_output_tokens")?,
        get(row, "sum_cost_micro_usd")?,
        get(row, "unknown_costs")?,
        get(row, "entries")?,
    ])
}

/// The Postgres schema's migrations, `(version, sql)` in order: for tests that build a schema
/// as an earlier Warden left it and open it with this one.
#[doc(hidden)]
pub fn postgres_migrations() -> &'static [(i64, &'static str)] {
    schema::MIGRATIONS
}

impl PostgresStore {
    /// Connects with the system clock and migrates the schema (the first schema of the
    /// connection's `search_path`; set it with `?options=-csearch_path%3DNAME`).
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_with(url, StoreOptions::default()).await
    }

    pub async fn connect_with(
        url: &str,
        options: StoreOptions,
    ) -> Result<PostgresStore, StoreError> {
        let config: tokio_postgres::Config = url.parse().map_err(|e: PgError| {
            StoreError::InvalidUrl(format!("{}: {e}", crate::redact_url(url)))
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.postgres_pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Database {
                backend: BACKEND,
                message: format!("could not build the connection pool: {e}"),
                retryable: false,
                source: None,
            })?;
        let store = PostgresStore {
            pool,
            clock: options.clock,
            observers: Arc::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&schema::MIGRATION_LOCK],
        )
        .await
        .map_err(pg_error)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version BIGINT PRIMARY KEY,
                applied_at_ms BIGINT NOT NULL
            )",
        )
        .await
        .map_err(pg_error)?;
        let current: i64 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0)::BIGINT AS version FROM schema_version",
                &[],
            )
            .await
            .map_err(pg_error)?
            .try_get("version")
            .map_err(pg_error)?;
        let latest = schema::MIGRATIONS.last().map_or(0, |(v, _)| *v);
        if current > latest {
            return Err(StoreError::SchemaTooNew {
                found: current,
                supported: latest,
            });
        }
        for (version, sql) in schema::MIGRATIONS {
            if *version <= current {
                continue;
            }
            tx.batch_execute(sql).await.map_err(pg_error)?;
            tx.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES ($1, $2)",
                &[version, &self.now()],
            )
            .await
            .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)
    }
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

impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn notices(&self) -> Vec<String> {
        Vec::new()
    }

    fn add_observer(&self, observer: Weak<dyn StoreObserver>) {
        self.observers.add(observer);
    }

    fn check_integrity(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_one(&*client, "SELECT 1", &[]).await?;
            Ok(())
        })
    }
}
