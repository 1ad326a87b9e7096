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
    check_approval, check_message_role, check_pinned_repos, event_record, finished_event,
    json_text, spend_from, status, to_i64, to_u32, to_u64, RawApiToken, RawApproval,
    RawChatMessage, RawEvent, RawIntent, RawJournal, RawMessage, RawRepo, RawRun, RawTask,
    RawWebSession, RawWebUser, API_TOKEN_COLUMNS, APPROVAL_COLUMNS, CHAT_MESSAGE_COLUMNS,
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

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(pg_error)
}

fn read_task(row: &Row) -> Result<Task, StoreError> {
    read_task_at(row, 0)
}

/// Reads `TASK_COLUMNS` starting at column `at`.
fn read_task_at(row: &Row, at: usize) -> Result<Task, StoreError> {
    RawTask {
        id: get(row, at)?,
        kind: get(row, at + 1)?,
        status: get(row, at + 2)?,
        owner: get(row, at + 3)?,
        prompt: get(row, at + 4)?,
        repos: get(row, at + 5)?,
        priority: get(row, at + 6)?,
        created_at_ms: get(row, at + 7)?,
        updated_at_ms: get(row, at + 8)?,
        follow_up_to: get(row, at + 9)?,
        retry_of: get(row, at + 10)?,
        result: get(row, at + 11)?,
        metadata: get(row, at + 12)?,
        run_count: get(row, at + 13)?,
        interrupted_runs: get(row, at + 14)?,
        callback_url: get(row, at + 15)?,
    }
    .decode()
}

fn read_run(row: &Row) -> Result<Run, StoreError> {
    RawRun {
        task_id: get(row, 0)?,
        number: get(row, 1)?,
        worker: get(row, 2)?,
        started_at_ms: get(row, 3)?,
        heartbeat_at_ms: get(row, 4)?,
        lease_expires_at_ms: get(row, 5)?,
        ended_at_ms: get(row, 6)?,
        outcome: get(row, 7)?,
    }
    .decode()
}

fn read_journal(row: &Row) -> Result<JournalEntry, StoreError> {
    RawJournal {
        seq: get(row, 0)?,
        at_ms: get(row, 1)?,
        kind: get(row, 2)?,
        payload: get(row, 3)?,
        prev_hash: get(row, 4)?,
        hash: get(row, 5)?,
        display: get(row, 6)?,
    }
    .decode()
}

fn read_event(row: &Row) -> Result<EventRecord, StoreError> {
    RawEvent {
        seq: get(row, 0)?,
        task_seq: get(row, 1)?,
        task_id: get(row, 2)?,
        at_ms: get(row, 3)?,
        event: get(row, 4)?,
    }
    .decode()
}

fn read_approval(row: &Row) -> Result<Approval, StoreError> {
    RawApproval {
        id: get(row, 0)?,
        task_id: get(row, 1)?,
        kind: get(row, 2)?,
        subject_hash: get(row, 3)?,
        status: get(row, 4)?,
        created_at_ms: get(row, 5)?,
        decided_by: get(row, 6)?,
        decided_at_ms: get(row, 7)?,
        consumed_at_ms: get(row, 8)?,
    }
    .decode()
}

fn read_intent(row: &Row) -> Result<Intent, StoreError> {
    RawIntent {
        id: get(row, 0)?,
        task_id: get(row, 1)?,
        kind: get(row, 2)?,
        payload: get(row, 3)?,
        status: get(row, 4)?,
        attempts: get(row, 5)?,
        next_attempt_at_ms: get(row, 6)?,
        lease_owner: get(row, 7)?,
        lease_expires_at_ms: get(row, 8)?,
        last_error: get(row, 9)?,
        created_at_ms: get(row, 10)?,
        done_at_ms: get(row, 11)?,
    }
    .decode()
}

fn exclusive_kinds() -> Vec<&'static str> {
    exclusive_kind_names().collect()
}

/// Rows of running change or maintain tasks (kinds in `$2`) sharing a repository with the task
/// `mine.task_id`; the caller appends the condition on `mine.task_id`.
const HOLDERS: &str = "SELECT 1 FROM tasks o
     JOIN task_repos held ON held.task_id = o.id
     JOIN task_repos mine ON mine.repo = held.repo
     WHERE o.status IN ('running', 'testing') AND o.kind = ANY($2)";

/// `TASK_COLUMNS` qualified for an `UPDATE tasks … FROM …` that returns them.
const CLAIMED_COLUMNS: &str = "tasks.id, tasks.kind, tasks.status, tasks.owner, tasks.prompt, \
     tasks.repos, tasks.priority, tasks.created_at_ms, tasks.updated_at_ms, tasks.follow_up_to, \
     tasks.retry_of, tasks.result, tasks.metadata, tasks.run_count, tasks.interrupted_runs, \
     tasks.callback_url";

/// The advisory-lock key of a repository name: stable across processes and versions.
fn repo_lock_key(repo: &str) -> i64 {
    let digest = Sha256::digest(format!("warden.repo:{repo}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// Ends each `(task, run)` row as interrupted and queues its task again, or fails it abandoned
/// after [`crate::MAX_INTERRUPTED_RUNS`] interruptions; also the events that stored. The rows
/// must be locked by `tx`.
async fn interrupt_runs(
    tx: &Transaction<'_>,
    runs: &[Row],
    now: i64,
) -> Result<(Vec<Requeued>, Vec<EventRecord>), StoreError> {
    let mut requeued = Vec::with_capacity(runs.len());
    let mut events = Vec::new();
    for row in runs {
        let id = crate::rows::task_id(get(row, 0)?)?;
        let number: i64 = get(row, 1)?;
        close_open_runs(tx, &id, RUN_INTERRUPTED, now).await?;
        let counted = query_one(
            tx,
            &format!(
                "UPDATE tasks SET interrupted_runs = interrupted_runs + 1 WHERE id = $1
                 RETURNING {TASK_COLUMNS}"
            ),
            &[&id.as_str()],
        )
        .await?;
        let task = read_task(&counted)?;
        let (to, result) = after_interruption(&task);
        let (_, event) = set_status(tx, &id, to, result.as_deref(), now).await?;
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

/// What one attempt of the locking claim path found.
enum Attempt {
    Claimed(Box<Claim>),
    /// Nothing is claimable.
    Empty,
    /// The candidate's repository was taken by a writer that started concurrently: try again.
    Blocked,
}

/// One statement: claims up to `limit` of the best claimable candidates that are questions.
/// Also says whether a change or maintain candidate was passed over (it needs
/// [`claim_attempt`]). Claims come back best first.
#[allow(clippy::too_many_arguments)]
async fn claim_fast(
    c: &dyn Conn,
    worker: &str,
    lease: Duration,
    kinds: &[&str],
    only: Option<&str>,
    exclusive: &[&str],
    now: i64,
    limit: i64,
) -> Result<(Vec<Claim>, bool), StoreError> {
    let expires = now.saturating_add(duration_ms(lease));
    let rows = query(
        c,
        &format!(
            "WITH candidate AS MATERIALIZED (
                 SELECT t.id, t.kind FROM tasks t
                 WHERE t.status = 'queued'
                   AND (cardinality($1::text[]) = 0 OR t.kind = ANY($1))
                   AND ($7::text IS NULL OR t.id = $7)
                   AND (NOT (t.kind = ANY($2)) OR NOT EXISTS ({HOLDERS} AND mine.task_id = t.id))
                 ORDER BY t.priority DESC, t.created_at_ms, t.id
                 LIMIT $6
                 FOR UPDATE OF t SKIP LOCKED),
             claimed AS (
                 UPDATE tasks SET status = 'running', run_count = run_count + 1,
                     updated_at_ms = $3
                 FROM candidate
                 WHERE tasks.id = candidate.id AND NOT (candidate.kind = ANY($2))
                 RETURNING {CLAIMED_COLUMNS}),
             run AS (
                 INSERT INTO runs (task_id, number, worker, started_at_ms, heartbeat_at_ms,
                     lease_expires_at_ms)
                 SELECT id, run_count, $4, $3, $3, $5 FROM claimed)
             SELECT candidate.id, claimed.* FROM candidate
             LEFT JOIN claimed ON claimed.id = candidate.id"
        ),
        &[&kinds, &exclusive, &now, &worker, &expires, &limit, &only],
    )
    .await?;
    let mut claims = Vec::with_capacity(rows.len());
    let mut passed_over = false;
    for row in &rows {
        if get::<Option<String>>(row, 1)?.is_none() {
            passed_over = true;
            continue;
        }
        let task = read_task_at(row, 1)?;
        claims.push(Claim {
            run_number: task.runs,
            task,
            lease_expires_at_ms: expires,
        });
    }
    claims.sort_by(|a, b| {
        (b.task.priority, a.task.created_at_ms, &a.task.id).cmp(&(
            a.task.priority,
            b.task.created_at_ms,
            &b.task.id,
        ))
    });
    Ok((claims, passed_over))
}

/// The locking claim path, inside `tx`: the best candidate of any kind; for a change or
/// maintain task, its repositories' advisory locks and a fresh look for a writer holding them.
async fn claim_attempt(
    tx: &Transaction<'_>,
    worker: &str,
    lease: Duration,
    kinds: &[&str],
    only: Option<&str>,
    exclusive: &[&str],
    now: i64,
) -> Result<Attempt, StoreError> {
    let candidate = query_opt(
        tx,
        &format!(
            "SELECT t.id, t.kind FROM tasks t
             WHERE t.status = 'queued'
               AND (cardinality($1::text[]) = 0 OR t.kind = ANY($1))
               AND ($3::text IS NULL OR t.id = $3)
               AND (NOT (t.kind = ANY($2)) OR NOT EXISTS ({HOLDERS} AND mine.task_id = t.id))
             ORDER BY t.priority DESC, t.created_at_ms, t.id
             LIMIT 1
             FOR UPDATE OF t SKIP LOCKED"
        ),
        &[&kinds, &exclusive, &only],
    )
    .await?;
    let Some(candidate) = candidate else {
        return Ok(Attempt::Empty);
    };
    let id: String = get(&candidate, 0)?;
    let kind: String = get(&candidate, 1)?;
    if exclusive.contains(&kind.as_str()) {
        // Serialise starts per repository, then look again with a fresh snapshot: a
        // concurrent claim may have started a writer there after ours was taken.
        let repos = query(
            tx,
            "SELECT repo FROM task_repos WHERE task_id = $1 ORDER BY repo",
            &[&id],
        )
        .await?;
        for row in &repos {
            let repo: String = get(row, 0)?;
            execute(
                tx,
                "SELECT pg_advisory_xact_lock($1)",
                &[&repo_lock_key(&repo)],
            )
            .await?;
        }
        let blocked = query_opt(
            tx,
            &format!("{HOLDERS} AND mine.task_id = $1 LIMIT 1"),
            &[&id, &exclusive],
        )
        .await?;
        if blocked.is_some() {
            return Ok(Attempt::Blocked);
        }
    }
    let expires = now.saturating_add(duration_ms(lease));
    let row = query_one(
        tx,
        &format!(
            "WITH claimed AS (
                 UPDATE tasks SET status = 'running', run_count = run_count + 1,
                     updated_at_ms = $2
                 WHERE id = $1 RETURNING {TASK_COLUMNS}),
             run AS (
                 INSERT INTO runs (task_id, number, worker, started_at_ms,
                     heartbeat_at_ms, lease_expires_at_ms)
                 SELECT id, run_count, $3, $2, $2, $4 FROM claimed)
             SELECT {TASK_COLUMNS} FROM claimed"
        ),
        &[&id, &now, &worker, &expires],
    )
    .await?;
    let task = read_task(&row)?;
    Ok(Attempt::Claimed(Box::new(Claim {
        run_number: task.runs,
        task,
        lease_expires_at_ms: expires,
    })))
}

/// [`PostgresStore::claim`] inside a transaction that did other work first: the locking
/// path's retries run in savepoints so they roll back alone.
async fn claim_in(
    tx: &mut Transaction<'_>,
    worker: &str,
    lease: Duration,
    kinds: &[&str],
    only: Option<&str>,
    exclusive: &[&str],
    now: i64,
) -> Result<Option<Claim>, StoreError> {
    let (claims, passed_over) =
        claim_fast(&*tx, worker, lease, kinds, only, exclusive, now, 1).await?;
    if let Some(claim) = claims.into_iter().next() {
        return Ok(Some(claim));
    }
    if !passed_over {
        return Ok(None);
    }
    for _ in 0..CLAIM_ATTEMPTS {
        let savepoint = tx.transaction().await.map_err(pg_error)?;
        match claim_attempt(&savepoint, worker, lease, kinds, only, exclusive, now).await? {
            Attempt::Claimed(claim) => {
                savepoint.commit().await.map_err(pg_error)?;
                return Ok(Some(*claim));
            }
            Attempt::Empty => {
                savepoint.commit().await.map_err(pg_error)?;
                return Ok(None);
            }
            Attempt::Blocked => savepoint.rollback().await.map_err(pg_error)?,
        }
    }
    Ok(None)
}

/// `finish_and_claim` as one statement (so nothing waits on the client while the event
/// counter's lock is held): lock the task, end the run if it is the worker's and open and the
/// task may move to the completion's status, move the task, write the events, and claim the
/// best candidate if it is a question. `None` when the run was not ended (nothing was
/// written). Also says whether a change or maintain candidate was passed over.
async fn finish_and_claim_fast(
    c: &dyn Conn,
    completion: &Completion,
    lease: Duration,
    kinds: &[&str],
    only: Option<&str>,
    exclusive: &[&str],
    now: i64,
) -> Result<Option<(Finished, Option<Claim>, bool)>, StoreError> {
    let to = completion.status;
    // A terminal status stores its `task_finished`, whose outcome comes from the result: without
    // one the transaction path reads the stored result (as `finish_run` does).
    if to.is_terminal() && completion.result.is_none() {
        return Ok(None);
    }
    let from: Vec<&str> = ALL_STATUSES
        .into_iter()
        .filter(|s| transition_allowed(*s, to))
        .map(status_name)
        .collect();
    let result = json_text(completion.result.as_ref())?;
    let events = finish_events(to, completion.result.as_ref());
    let texts = events
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    let expires = now.saturating_add(duration_ms(lease));
    let number = i64::from(completion.run.number);
    // The snapshot still sees the task being finished as running: it holds nothing anymore.
    let holders = format!("{} AND o.id <> $1", HOLDERS.replace("$2", "$10"));
    let rows = c
        .rows(
            &format!(
                "WITH task AS MATERIALIZED (
                 SELECT id, status FROM tasks WHERE id = $1 FOR NO KEY UPDATE),
             ended AS (
                 UPDATE runs SET ended_at_ms = $4, outcome = $5
                 FROM task
                 WHERE runs.task_id = task.id AND runs.number = $2 AND runs.worker = $3
                   AND runs.ended_at_ms IS NULL AND task.status = ANY($6)
                 RETURNING runs.task_id),
             finished AS (
                 UPDATE tasks SET status = $5, result = COALESCE($7, tasks.result),
                     updated_at_ms = $4
                 FROM ended WHERE tasks.id = ended.task_id
                 RETURNING {CLAIMED_COLUMNS}),
             counter AS (
                 UPDATE counters SET value = value + cardinality($8::text[])
                 WHERE name = 'events' AND cardinality($8::text[]) > 0
                   AND EXISTS (SELECT 1 FROM finished)
                 RETURNING value),
             inserted AS (
                 INSERT INTO events (seq, task_id, task_seq, at_ms, event)
                 SELECT counter.value - cardinality($8::text[]) + e.ord, $1,
                     COALESCE((SELECT MAX(x.task_seq) FROM events x WHERE x.task_id = $1), 0)
                         + e.ord,
                     $4, e.event
                 FROM counter, unnest($8::text[]) WITH ORDINALITY AS e(event, ord)
                 RETURNING seq, task_seq),
             candidate AS MATERIALIZED (
                 SELECT t.id, t.kind FROM tasks t
                 WHERE t.status = 'queued' AND EXISTS (SELECT 1 FROM finished)
                   AND (cardinality($9::text[]) = 0 OR t.kind = ANY($9))
                   AND ($12::text IS NULL OR t.id = $12)
                   AND (NOT (t.kind = ANY($10))
                        OR NOT EXISTS ({holders} AND mine.task_id = t.id))
                 ORDER BY t.priority DESC, t.created_at_ms, t.id
                 LIMIT 1
                 FOR UPDATE OF t SKIP LOCKED),
             claimed AS (
                 UPDATE tasks SET status = 'running', run_count = run_count + 1,
                     updated_at_ms = $4
                 FROM candidate
                 WHERE tasks.id = candidate.id AND NOT (candidate.kind = ANY($10))
                 RETURNING {CLAIMED_COLUMNS}),
             run AS (
                 INSERT INTO runs (task_id, number, worker, started_at_ms, heartbeat_at_ms,
                     lease_expires_at_ms)
                 SELECT id, run_count, $3, $4, $4, $11 FROM claimed)
             SELECT (SELECT COALESCE(array_agg(seq ORDER BY seq), '{{}}') FROM inserted),
                 (SELECT COALESCE(array_agg(task_seq ORDER BY seq), '{{}}') FROM inserted),
                 EXISTS (SELECT 1 FROM candidate) AND NOT EXISTS (SELECT 1 FROM claimed),
                 finished.*, claimed.*
             FROM finished LEFT JOIN claimed ON true"
            ),
            &[
                &completion.run.task.as_str(),
                &number,
                &completion.worker,
                &now,
                &status_name(to),
                &from,
                &result,
                &texts,
                &kinds,
                &exclusive,
                &expires,
                &only,
            ],
        )
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        // An event of the task was committed after this statement's snapshot was taken: the
        // caller's transaction, which reads the task's events after taking the counter lock,
        // does it instead.
        Err(e) if has_code(&e, &SqlState::UNIQUE_VIOLATION) => return Ok(None),
        Err(e) => return Err(pg_error(e)),
    };
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    let seqs: Vec<i64> = get(&row, 0)?;
    let task_seqs: Vec<i64> = get(&row, 1)?;
    let passed_over: bool = get(&row, 2)?;
    let task = read_task_at(&row, 3)?;
    let claim = match get::<Option<String>>(&row, 19)? {
        Some(_) => {
            let next = read_task_at(&row, 19)?;
            Some(Claim {
                run_number: next.runs,
                task: next,
                lease_expires_at_ms: expires,
            })
        }
        None => None,
    };
    let records = event_records(&task.id, events, &seqs, &task_seqs, now)?;
    Ok(Some((
        Finished {
            task,
            events: records,
        },
        claim,
        passed_over,
    )))
}

/// The events a run's end stores with it: `task_finished` for a terminal status (as
/// `set_status` stores it), computed from the task's result.
fn finish_events(to: TaskStatus, result: Option<&serde_json::Value>) -> Vec<Event> {
    if to.is_terminal() {
        vec![finished_event(to, result)]
    } else {
        Vec::new()
    }
}

/// Stored `events` of `task` with the sequence numbers the statement returned for them.
fn event_records(
    task: &TaskId,
    events: Vec<Event>,
    seqs: &[i64],
    task_seqs: &[i64],
    now: i64,
) -> Result<Vec<EventRecord>, StoreError> {
    if seqs.len() != events.len() || task_seqs.len() != events.len() {
        return Err(StoreError::invalid_data("finished run: events not stored"));
    }
    events
        .into_iter()
        .zip(seqs.iter().zip(task_seqs))
        .map(|(event, (seq, task_seq))| event_record(task, *seq, *task_seq, now, event))
        .collect()
}

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

/// `finish_runs` as one statement: [`END_RUNS`], the tasks moved, and the events of the ended
/// runs written (sequences from the event counter, taken in the same statement). One outcome
/// slot per completion: `Some` for an ended run (or a result that does not serialize), `None`
/// for a completion the statement did not apply (its checks go through the transaction path).
/// `Ok(None)` when an event of one of the tasks was committed after the statement's snapshot
/// (nothing was written: the transaction path reads the tasks' events after the counter lock).
async fn finish_runs_fast(
    c: &dyn Conn,
    completions: &[Completion],
    now: i64,
) -> Result<Option<Vec<Option<Result<Finished, StoreError>>>>, StoreError> {
    let mut results = Vec::with_capacity(completions.len());
    let mut outcomes: Vec<Option<Result<Finished, StoreError>>> = Vec::new();
    let mut row_events = Vec::with_capacity(completions.len());
    // A terminal completion without a result is left to the transaction path: its event's
    // outcome comes from the stored result (as `finish_run` does).
    let mut in_statement = Vec::with_capacity(completions.len());
    let (mut event_rows, mut event_texts, mut event_idx) = (Vec::new(), Vec::new(), Vec::new());
    for (i, completion) in completions.iter().enumerate() {
        let events = finish_events(completion.status, completion.result.as_ref());
        let prepared = json_text(completion.result.as_ref()).and_then(|result| {
            let texts = events
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<_>, _>>()?;
            Ok((result, texts))
        });
        match prepared {
            Ok((result, texts)) => {
                results.push(result);
                outcomes.push(None);
                in_statement
                    .push(!(completion.status.is_terminal() && completion.result.is_none()));
                for text in texts {
                    event_rows.push(to_i64(i as u64)?);
                    event_idx.push(to_i64(event_texts.len() as u64)?);
                    event_texts.push(text);
                }
            }
            Err(error) => {
                results.push(None);
                outcomes.push(Some(Err(error)));
                in_statement.push(false);
            }
        }
        row_events.push(events);
    }
    let input = EndRunsInput::new(completions, &results, &in_statement)?;
    let rows = c
        .rows(
            &format!(
                "{END_RUNS},
                 finished AS (
                     UPDATE tasks SET status = ended.status,
                         result = COALESCE(ended.result, tasks.result), updated_at_ms = $7
                     FROM ended WHERE tasks.id = ended.task_id
                     RETURNING ended.ord, {CLAIMED_COLUMNS}),
                 wanted AS MATERIALIZED (
                     SELECT e.event, f.id AS task_id,
                         row_number() OVER (ORDER BY e.idx) AS n,
                         row_number() OVER (PARTITION BY f.id ORDER BY e.idx) AS k
                     FROM unnest($9::bigint[], $10::text[], $11::bigint[]) AS e(row_ord, event, idx)
                     JOIN finished f ON f.ord = e.row_ord),
                 counter AS (
                     UPDATE counters SET value = value + (SELECT count(*) FROM wanted)
                     WHERE name = 'events' AND EXISTS (SELECT 1 FROM wanted)
                     RETURNING value),
                 inserted AS (
                     INSERT INTO events (seq, task_id, task_seq, at_ms, event)
                     SELECT counter.value - (SELECT count(*) FROM wanted) + w.n, w.task_id,
                         COALESCE((SELECT MAX(x.task_seq) FROM events x
                                   WHERE x.task_id = w.task_id), 0) + w.k,
                         $7, w.event
                     FROM counter, wanted w
                     RETURNING seq, task_seq, task_id)
                 SELECT f.*,
                     (SELECT COALESCE(array_agg(i.seq ORDER BY i.seq), '{{}}') FROM inserted i
                      WHERE i.task_id = f.id),
                     (SELECT COALESCE(array_agg(i.task_seq ORDER BY i.seq), '{{}}') FROM inserted i
                      WHERE i.task_id = f.id)
                 FROM finished f"
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
                &event_rows,
                &event_texts,
                &event_idx,
            ],
        )
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) if has_code(&e, &SqlState::UNIQUE_VIOLATION) => return Ok(None),
        Err(e) => return Err(pg_error(e)),
    };
    for row in &rows {
        let ord: i64 = get(row, 0)?;
        let i = usize::try_from(ord)
            .ok()
            .filter(|i| *i < completions.len())
            .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown row"))?;
        let task = read_task_at(row, 1)?;
        let seqs: Vec<i64> = get(row, 17)?;
        let task_seqs: Vec<i64> = get(row, 18)?;
        let events = std::mem::take(&mut row_events[i]);
        let records = event_records(&task.id, events, &seqs, &task_seqs, now)?;
        outcomes[i] = Some(Ok(Finished {
            task,
            events: records,
        }));
    }
    Ok(Some(outcomes))
}

/// `finish_runs` in one transaction: [`end_runs`], then the events.
async fn finish_runs_in_transaction(
    client: &mut deadpool_postgres::Client,
    completions: Vec<Completion>,
    now: i64,
) -> Result<Vec<Result<Finished, StoreError>>, StoreError> {
    let tx = client.transaction().await.map_err(pg_error)?;
    let ended = end_runs(&tx, completions, now).await?;
    let finished = append_finish_events(&tx, ended, now).await?;
    tx.commit().await.map_err(pg_error)?;
    Ok(finished)
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

/// The first outcome's error (the caller checked there is one).
fn single_ended(ended: Vec<Ended>) -> StoreError {
    match ended.into_iter().next() {
        Some(Err(error)) => error,
        Some(Ok(_)) | None => StoreError::invalid_data("finish_runs returned no outcome"),
    }
}

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
        let ord: i64 = get(row, 0)?;
        let slot = usize::try_from(ord)
            .ok()
            .and_then(|i| outcomes.get_mut(i))
            .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown row"))?;
        *slot = Some(Ok(read_task_at(row, 1)?));
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

/// Writes the `task_finished` of every run the statement of [`end_runs`] moved to a terminal
/// status (outcome from the stored result, as `set_status` does), with sequences taken from the
/// event counter (whose row lock `tx` then holds until it ends, as `append_event` does).
async fn append_finish_events(
    tx: &Transaction<'_>,
    ended: Vec<Ended>,
    now: i64,
) -> Result<Vec<Result<Finished, StoreError>>, StoreError> {
    let mut pending = Vec::new();
    let (mut tasks, mut texts) = (Vec::new(), Vec::new());
    for run in ended.iter().flatten() {
        let events = match run.stored {
            Some(_) => Vec::new(),
            None => finish_events(run.to, run.task.result.as_ref()),
        };
        for event in &events {
            tasks.push(run.task.id.as_str());
            texts.push(serde_json::to_string(event)?);
        }
        pending.push(events);
    }
    let mut sequences = Vec::new();
    if !texts.is_empty() {
        let count = to_i64(texts.len() as u64)?;
        let counter = query_one(
            tx,
            "UPDATE counters SET value = value + $1 WHERE name = 'events' RETURNING value",
            &[&count],
        )
        .await?;
        let base = get::<i64>(&counter, 0)? - count;
        let ords: Vec<i64> = (1..=count).collect();
        // A new statement, so its snapshot includes every event committed before we took the
        // counter lock.
        let rows = query(
            tx,
            "INSERT INTO events (seq, task_id, task_seq, at_ms, event)
             SELECT $1 + i.ord, i.task_id,
                 COALESCE((SELECT MAX(e.task_seq) FROM events e WHERE e.task_id = i.task_id), 0)
                     + row_number() OVER (PARTITION BY i.task_id ORDER BY i.ord),
                 $2, i.event
             FROM unnest($3::text[], $4::text[], $5::bigint[]) AS i(task_id, event, ord)
             RETURNING seq, task_seq",
            &[&base, &now, &tasks, &texts, &ords],
        )
        .await?;
        sequences = vec![(0, 0); texts.len()];
        for row in &rows {
            let seq: i64 = get(row, 0)?;
            let slot = usize::try_from(seq - base - 1)
                .ok()
                .and_then(|i| sequences.get_mut(i))
                .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown event"))?;
            *slot = (seq, get::<i64>(row, 1)?);
        }
    }
    let mut sequences = sequences.into_iter();
    let mut pending = pending.into_iter();
    let mut finished = Vec::with_capacity(ended.len());
    for outcome in ended {
        finished.push(match outcome {
            Err(error) => Err(error),
            Ok(EndedRun {
                task,
                stored: Some(events),
                ..
            }) => {
                pending.next();
                Ok(Finished { task, events })
            }
            Ok(EndedRun {
                task, stored: None, ..
            }) => {
                let events = pending.next().unwrap_or_default();
                let mut records = Vec::with_capacity(events.len());
                for event in events {
                    let (seq, task_seq) = sequences
                        .next()
                        .ok_or_else(|| StoreError::invalid_data("finish_runs: missing event"))?;
                    records.push(event_record(&task.id, seq, task_seq, now, event)?);
                }
                Ok(Finished {
                    task,
                    events: records,
                })
            }
        });
    }
    Ok(finished)
}

fn read_repo(row: &Row) -> Result<Repository, StoreError> {
    RawRepo {
        name: get(row, 0)?,
        source: get(row, 1)?,
        branch: get(row, 2)?,
        checks: get(row, 3)?,
        created_by: get(row, 4)?,
        created_at_ms: get(row, 5)?,
        mounts: get(row, 6)?,
        prepare: get(row, 7)?,
    }
    .decode()
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

/// Ends the journal of each open run of the task with the record saying how the task ended
/// ([`crate::journal::ended_from_outside`]), inside the caller's transaction, before the runs
/// close. A worker appending to the same run at the same moment loses on the primary key.
async fn end_open_journals(
    c: &dyn Conn,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    let result: Option<serde_json::Value> = result.map(serde_json::from_str).transpose()?;
    let rows = query(
        c,
        "SELECT r.number, j.seq, j.hash FROM runs r
         JOIN LATERAL (SELECT seq, hash FROM journal
                       WHERE task_id = r.task_id AND run_number = r.number
                       ORDER BY seq DESC LIMIT 1) j ON true
         WHERE r.task_id = $1 AND r.ended_at_ms IS NULL",
        &[&id.as_str()],
    )
    .await?;
    for row in &rows {
        let number: i64 = get(row, 0)?;
        let seq: i64 = get(row, 1)?;
        let hash: String = get(row, 2)?;
        let entry = crate::journal::ended_from_outside(
            (crate::rows::to_u64(seq)?, &hash),
            crate::rows::to_u64(now)?,
            to,
            result.as_ref(),
        )?;
        insert_journal(c, id, number, &entry)
            .await?
            .map_err(pg_error)?;
    }
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
    if !to.is_terminal() {
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
    .map(|row| Ok::<_, StoreError>((get(&row, 0)?, get(&row, 1)?)))
    .transpose()?;
    crate::checks::check_run_held(run, worker, row)
}

async fn load_approval(c: &dyn Conn, id: &str, lock: bool) -> Result<Option<Approval>, StoreError> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    query_opt(c, &sql, &[&id])
        .await?
        .as_ref()
        .map(read_approval)
        .transpose()
}

async fn load_intent(c: &dyn Conn, id: &str, lock: bool) -> Result<Option<Intent>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    query_opt(c, &sql, &[&id])
        .await?
        .as_ref()
        .map(read_intent)
        .transpose()
}

/// An intent `worker` holds and that is still pending (row-locked), or why not.
async fn held_intent(tx: &Transaction<'_>, id: &str, worker: &str) -> Result<Intent, StoreError> {
    check_intent_held(id, worker, load_intent(tx, id, true).await?)
}

const SPEND_COLUMNS: &str = "COALESCE(SUM(input_tokens), 0)::BIGINT, \
     COALESCE(SUM(cached_input_tokens), 0)::BIGINT, COALESCE(SUM(output_tokens), 0)::BIGINT, \
     COALESCE(SUM(cost_micro_usd), 0)::BIGINT, COUNT(*) - COUNT(cost_micro_usd), COUNT(*)";

fn read_spend(row: &Row) -> Result<Spend, StoreError> {
    spend_from([
        get(row, 0)?,
        get(row, 1)?,
        get(row, 2)?,
        get(row, 3)?,
        get(row, 4)?,
        get(row, 5)?,
    ])
}

fn read_api_token(row: &Row) -> Result<ApiToken, StoreError> {
    Ok(RawApiToken {
        id: get(row, 0)?,
        name: get(row, 1)?,
        role: get(row, 2)?,
        digest: get(row, 3)?,
        created_by: get(row, 4)?,
        created_at_ms: get(row, 5)?,
        revoked_at_ms: get(row, 6)?,
    }
    .decode())
}

fn read_chat_message(row: &Row) -> Result<ChatMessage, StoreError> {
    RawChatMessage {
        id: get(row, 0)?,
        channel: get(row, 1)?,
        chat: get(row, 2)?,
        task_id: get(row, 3)?,
        text: get(row, 4)?,
        markup: get(row, 5)?,
        state: get(row, 6)?,
        message_id: get(row, 7)?,
        revision: get(row, 8)?,
        delivered_revision: get(row, 9)?,
        attempts: get(row, 10)?,
        next_attempt_at_ms: get(row, 11)?,
        last_error: get(row, 12)?,
        created_at_ms: get(row, 13)?,
        updated_at_ms: get(row, 14)?,
    }
    .decode()
}

async fn load_chat_message(c: &dyn Conn, id: &str) -> Result<Option<ChatMessage>, StoreError> {
    query_opt(
        c,
        &format!("SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = $1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(read_chat_message)
    .transpose()
}

/// Inserts `message` as pending and due at `now`, unless its id exists.
async fn insert_chat_message(
    c: &dyn Conn,
    message: &NewChatMessage,
    now: i64,
) -> Result<(), StoreError> {
    execute(
        c,
        "INSERT INTO chat_messages (id, channel, chat, task_id, text, markup, state, revision,
             delivered_revision, attempts, next_attempt_at_ms, created_at_ms, updated_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', 1, 0, 0, $7, $7, $7)
         ON CONFLICT (id) DO NOTHING",
        &[
            &message.id,
            &message.channel,
            &message.chat,
            &message.task.as_ref().map(TaskId::as_str),
            &message.text,
            &message.markup,
            &now,
        ],
    )
    .await?;
    Ok(())
}

fn read_web_user(row: &Row) -> Result<WebUser, StoreError> {
    Ok(RawWebUser {
        name: get(row, 0)?,
        role: get(row, 1)?,
        password_hash: get(row, 2)?,
        created_at_ms: get(row, 3)?,
        updated_at_ms: get(row, 4)?,
    }
    .decode())
}

fn read_web_session(row: &Row) -> Result<WebSession, StoreError> {
    Ok(RawWebSession {
        id: get(row, 0)?,
        digest: get(row, 1)?,
        name: get(row, 2)?,
        role_at_sign_in: get(row, 3)?,
        credential: get(row, 4)?,
        address: get(row, 5)?,
        user_agent: get(row, 6)?,
        created_at_ms: get(row, 7)?,
        expires_at_ms: get(row, 8)?,
        revoked_at_ms: get(row, 9)?,
    }
    .decode())
}

/// Revokes the unrevoked sessions `name` signed in with a password.
async fn revoke_password_sessions(c: &dyn Conn, name: &str, now: i64) -> Result<(), StoreError> {
    execute(
        c,
        "UPDATE web_sessions SET revoked_at_ms = $3
         WHERE name = $1 AND credential = $2 AND revoked_at_ms IS NULL",
        &[&name, &WEB_CREDENTIAL_PASSWORD, &now],
    )
    .await?;
    Ok(())
}

fn read_message(row: &Row) -> Result<TaskMessage, StoreError> {
    RawMessage {
        seq: get(row, 0)?,
        role: get(row, 1)?,
        text: get(row, 2)?,
        author: get(row, 3)?,
        at_ms: get(row, 4)?,
    }
    .decode()
}

/// Appends a message to a task whose row `tx` has locked (so sequences cannot collide).
async fn insert_message(
    tx: &Transaction<'_>,
    task: &TaskId,
    role: &str,
    text: &str,
    author: &str,
    now: i64,
) -> Result<TaskMessage, StoreError> {
    let row = query_one(
        tx,
        &format!(
            "INSERT INTO task_messages (task_id, seq, role, text, author, at_ms)
             VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_messages WHERE task_id = $1),
                     $2, $3, $4, $5)
             RETURNING {MESSAGE_COLUMNS}"
        ),
        &[&task.as_str(), &role, &text, &author, &now],
    )
    .await?;
    read_message(&row)
}

/// The `WHERE` clause of a usage summary: `$1` owner, `$2` since.
const USAGE_FILTER: &str =
    "($1::text IS NULL OR task_id IN (SELECT id FROM tasks WHERE owner = $1))
     AND ($2::bigint IS NULL OR at_ms >= $2)";

/// Spend of rows whose columns from 1 on are `SPEND_COLUMNS`.
fn read_spend_at(row: &Row) -> Result<Spend, StoreError> {
    spend_from([
        get(row, 1)?,
        get(row, 2)?,
        get(row, 3)?,
        get(row, 4)?,
        get(row, 5)?,
        get(row, 6)?,
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
                "SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_version",
                &[],
            )
            .await
            .map_err(pg_error)?
            .try_get(0)
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

    async fn create_task_once(
        &self,
        task: &NewTask,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Option<Created>, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        if let Some(key) = idempotency {
            if let Some(row) = query_opt(
                &tx,
                "SELECT request_hash, task_id FROM idempotency_keys WHERE owner = $1 AND key = $2",
                &[&key.owner, &key.key],
            )
            .await?
            {
                let hash: String = get(&row, 0)?;
                let task_id: String = get(&row, 1)?;
                check_replay(key, &hash)?;
                let existing = load_task(&tx, &task_id)
                    .await?
                    .ok_or_else(|| not_found("task", &task_id))?;
                return Ok(Some(Created::Replayed(existing)));
            }
        }
        if let Some(old) = &task.retry_of {
            // Terminal statuses are immutable, so this check cannot go stale.
            check_retryable(old, require_task_exists(&tx, old).await?)?;
        }
        if let Some(parent) = &task.follow_up_to {
            require_task_exists(&tx, parent).await?;
        }
        let repos = serde_json::to_string(&task.repos)?;
        let metadata = serde_json::to_string(&task.metadata)?;
        let inserted = query_opt(
            &tx,
            &format!(
                "INSERT INTO tasks (id, kind, status, owner, prompt, repos, priority,
                     created_at_ms, updated_at_ms, follow_up_to, retry_of, result, metadata,
                     callback_url)
                 VALUES ($1, $2, 'queued', $3, $4, $5, $6, $7, $7, $8, $9, NULL, $10, $11)
                 ON CONFLICT (id) DO NOTHING RETURNING {TASK_COLUMNS}"
            ),
            &[
                &task.id.as_str(),
                &kind_name(task.kind),
                &task.owner,
                &task.prompt,
                &repos,
                &task.priority,
                &now,
                &task.follow_up_to.as_ref().map(TaskId::as_str),
                &task.retry_of.as_ref().map(TaskId::as_str),
                &metadata,
                &task.callback_url,
            ],
        )
        .await?;
        let Some(row) = inserted else {
            return Err(StoreError::AlreadyExists {
                what: "task",
                id: task.id.to_string(),
            });
        };
        let created = read_task(&row)?;
        let names: Vec<&str> = task.repos.iter().map(|r| r.name.as_str()).collect();
        execute(
            &tx,
            "INSERT INTO task_repos (task_id, repo) SELECT $1, unnest($2::text[])
             ON CONFLICT DO NOTHING",
            &[&task.id.as_str(), &names],
        )
        .await?;
        if let Some(key) = idempotency {
            let stored = execute(
                &tx,
                "INSERT INTO idempotency_keys (owner, key, request_hash, task_id, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &key.owner,
                    &key.key,
                    &key.request_hash,
                    &task.id.as_str(),
                    &now,
                ],
            )
            .await?;
            if stored == 0 {
                // A concurrent request with the same key won; roll back and replay it.
                tx.rollback().await.map_err(pg_error)?;
                return Ok(None);
            }
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(Some(Created::New(created)))
    }

    async fn transition_impl(
        &self,
        id: &TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> Result<Task, StoreError> {
        check_transition(from, to)?;
        let result = json_text(result.as_ref())?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        check_status(id, from, lock_task_status(&tx, id).await?)?;
        let open = is_active(to)
            && query_opt(
                &tx,
                "SELECT 1 FROM runs WHERE task_id = $1 AND ended_at_ms IS NULL",
                &[&id.as_str()],
            )
            .await?
            .is_some();
        check_open_run(id, to, open)?;
        if to.is_terminal() {
            end_open_journals(&tx, id, to, result.as_deref(), now).await?;
        }
        if transition_ends_run(to) {
            close_open_runs(&tx, id, status_name(to), now).await?;
        }
        let (task, event) = set_status(&tx, id, to, result.as_deref(), now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&event);
        Ok(task)
    }

    async fn claim_impl(
        &self,
        worker: &str,
        lease: Duration,
        filter: &ClaimFilter,
    ) -> Result<Option<Claim>, StoreError> {
        let kinds: Vec<&str> = filter.kinds.iter().map(|k| kind_name(*k)).collect();
        let only = filter.task.as_ref().map(|t| t.as_str());
        let exclusive = exclusive_kinds();
        let mut client = self.client().await?;
        // Fast path, one statement: take the best candidate if it is a question. A change or
        // maintain task needs the per-repository lock below.
        let (claims, passed_over) = claim_fast(
            &*client,
            worker,
            lease,
            &kinds,
            only,
            &exclusive,
            self.now(),
            1,
        )
        .await?;
        self.observers.claims(&claims);
        if let Some(claim) = claims.into_iter().next() {
            return Ok(Some(claim));
        }
        if !passed_over {
            return Ok(None);
        }
        for _ in 0..CLAIM_ATTEMPTS {
            let tx = client.transaction().await.map_err(pg_error)?;
            match claim_attempt(&tx, worker, lease, &kinds, only, &exclusive, self.now()).await? {
                Attempt::Claimed(claim) => {
                    tx.commit().await.map_err(pg_error)?;
                    self.observers.claims([&*claim]);
                    return Ok(Some(*claim));
                }
                Attempt::Empty => {
                    tx.commit().await.map_err(pg_error)?;
                    return Ok(None);
                }
                Attempt::Blocked => tx.rollback().await.map_err(pg_error)?,
            }
        }
        Ok(None)
    }

    async fn claim_batch_impl(
        &self,
        worker: &str,
        lease: Duration,
        filter: &ClaimFilter,
        max: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let kinds: Vec<&str> = filter.kinds.iter().map(|k| kind_name(*k)).collect();
        let only = filter.task.as_ref().map(|t| t.as_str());
        let exclusive = exclusive_kinds();
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let (mut claims, passed_over) = {
            let client = self.client().await?;
            claim_fast(
                &*client,
                worker,
                lease,
                &kinds,
                only,
                &exclusive,
                self.now(),
                limit,
            )
            .await?
        };
        self.observers.claims(&claims);
        // Change and maintain tasks among the candidates need the per-repository lock: one
        // claim at a time, until the batch is full or nothing is claimable.
        if passed_over {
            while claims.len() < max {
                match self.claim_impl(worker, lease, filter).await? {
                    Some(claim) => claims.push(claim),
                    None => break,
                }
            }
        }
        Ok(claims)
    }

    async fn finish_runs_impl(
        &self,
        completions: Vec<Completion>,
    ) -> Result<Vec<Result<Finished, StoreError>>, StoreError> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut client = self.client().await?;
        let Some(mut outcomes) = finish_runs_fast(&*client, &completions, now).await? else {
            let finished = finish_runs_in_transaction(&mut client, completions, now).await?;
            self.observers.finished(finished.iter().flatten());
            return Ok(finished);
        };
        self.observers.finished(outcomes.iter().flatten().flatten());
        // The rest (lost leases, refused transitions, a task's second completion) go through
        // `finish_run`'s checks, which name the reason. The statement above committed: from
        // here on a failure is that of the remaining rows only.
        let mut rest = Vec::new();
        let mut slots = Vec::new();
        for (i, completion) in completions.into_iter().enumerate() {
            if outcomes[i].is_none() {
                rest.push(completion);
                slots.push(i);
            }
        }
        if rest.is_empty() {
            return Ok(outcomes.into_iter().flatten().collect());
        }
        match finish_runs_in_transaction(&mut client, rest, self.now()).await {
            Ok(finished) => {
                self.observers.finished(finished.iter().flatten());
                for (i, outcome) in slots.into_iter().zip(finished) {
                    outcomes[i] = Some(outcome);
                }
            }
            Err(error) => {
                for i in slots {
                    outcomes[i] = Some(Err(StoreError::Database {
                        backend: BACKEND,
                        message: error.to_string(),
                        retryable: error.is_retryable(),
                        source: None,
                    }));
                }
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| Err(StoreError::invalid_data("finish_runs: no outcome")))
            })
            .collect())
    }

    async fn finish_and_claim_impl(
        &self,
        completion: Completion,
        lease: Duration,
        filter: &ClaimFilter,
    ) -> Result<(Finished, Option<Claim>), StoreError> {
        let kinds: Vec<&str> = filter.kinds.iter().map(|k| kind_name(*k)).collect();
        let only = filter.task.as_ref().map(|t| t.as_str());
        let exclusive = exclusive_kinds();
        let worker = completion.worker.clone();
        let now = self.now();
        let mut client = self.client().await?;
        if !is_active(completion.status) {
            match finish_and_claim_fast(&*client, &completion, lease, &kinds, only, &exclusive, now)
                .await
            {
                Ok(Some((finished, claim, passed_over))) => {
                    drop(client);
                    self.observers.finished([&finished]);
                    self.observers.claims(&claim);
                    let claim = match claim {
                        // The finish is committed: a failure to claim the change or maintain
                        // task that came next leaves it queued for the next claim.
                        None if passed_over => self
                            .claim_impl(&worker, lease, filter)
                            .await
                            .unwrap_or(None),
                        claim => claim,
                    };
                    return Ok((finished, claim));
                }
                // Not applied: the transaction below says why (or applies it after a race).
                Ok(None) => {}
                Err(error) => return Err(error),
            }
        }
        let mut tx = client.transaction().await.map_err(pg_error)?;
        // A failed check returns before anything is claimed; dropping `tx` rolls back.
        let ended = end_runs(&tx, vec![completion], now).await?;
        if let Some(Err(_)) = ended.first() {
            return Err(single_ended(ended));
        }
        let claim = claim_in(&mut tx, &worker, lease, &kinds, only, &exclusive, now).await?;
        // Events last: the event counter's row lock is held until the commit.
        let finished = crate::batch::single(append_finish_events(&tx, ended, now).await?)?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.finished([&finished]);
        self.observers.claims(&claim);
        Ok((finished, claim))
    }

    async fn heartbeat_impl(
        &self,
        run: &RunRef,
        worker: &str,
        lease: Duration,
    ) -> Result<i64, StoreError> {
        let now = self.now();
        let expires = now.saturating_add(duration_ms(lease));
        let number = i64::from(run.number);
        let client = self.client().await?;
        let updated = execute(
            &*client,
            "UPDATE runs SET heartbeat_at_ms = $4, lease_expires_at_ms = $5
             WHERE task_id = $1 AND number = $2 AND worker = $3 AND ended_at_ms IS NULL",
            &[&run.task.as_str(), &number, &worker, &now, &expires],
        )
        .await?;
        if updated == 1 {
            return Ok(expires);
        }
        check_run_held(&*client, run, worker).await?;
        Err(run_lost(run, worker))
    }

    async fn finish_run_impl(
        &self,
        run: &RunRef,
        worker: &str,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> Result<Task, StoreError> {
        let result_value = result;
        let result = json_text(result_value.as_ref())?;
        let now = self.now();
        let mut client = self.client().await?;
        // A terminal status stores its `task_finished` event in the same statement; its
        // outcome comes from the result, so without one the transaction below reads it.
        let event = match (&result_value, to.is_terminal()) {
            (Some(value), true) => Some(finished_event(to, Some(value))),
            _ => None,
        };
        let finished = event.as_ref().map(serde_json::to_string).transpose()?;
        if !is_active(to) && (finished.is_some() || !to.is_terminal()) {
            // Fast path, one statement: lock the task, end the run if it is `worker`'s and
            // open and the task may move to `to`, then move it (and store the event of a
            // terminal move). No row means one of those failed; the transaction below finds
            // out which.
            let from: Vec<&str> = ALL_STATUSES
                .into_iter()
                .filter(|s| transition_allowed(*s, to))
                .map(status_name)
                .collect();
            let number = i64::from(run.number);
            let row = query_opt(
                &*client,
                &format!(
                    "WITH task AS (SELECT id, status FROM tasks WHERE id = $1 FOR NO KEY UPDATE),
                     ended AS (
                         UPDATE runs SET ended_at_ms = $4, outcome = $5
                         FROM task
                         WHERE runs.task_id = task.id AND runs.number = $2 AND runs.worker = $3
                           AND runs.ended_at_ms IS NULL AND task.status = ANY($6)
                         RETURNING runs.task_id),
                     counter AS (
                         UPDATE counters SET value = value + 1
                         WHERE name = 'events' AND $8::text IS NOT NULL
                           AND EXISTS (SELECT 1 FROM ended)
                         RETURNING value),
                     event AS (
                         INSERT INTO events (seq, task_id, task_seq, at_ms, event)
                         SELECT counter.value, $1,
                             (SELECT COALESCE(MAX(task_seq), 0) + 1 FROM events
                              WHERE task_id = $1),
                             $4, $8
                         FROM counter
                         RETURNING seq, task_seq)
                     UPDATE tasks SET status = $5, result = COALESCE($7, tasks.result),
                         updated_at_ms = $4
                     FROM ended WHERE tasks.id = ended.task_id
                     RETURNING {CLAIMED_COLUMNS}, (SELECT seq FROM event),
                         (SELECT task_seq FROM event)"
                ),
                &[
                    &run.task.as_str(),
                    &number,
                    &worker,
                    &now,
                    &status_name(to),
                    &from,
                    &result,
                    &finished,
                ],
            )
            .await?;
            if let Some(row) = row {
                let task = read_task(&row)?;
                let seqs: (Option<i64>, Option<i64>) = (get(&row, 16)?, get(&row, 17)?);
                if let (Some(event), (Some(seq), Some(task_seq))) = (event, seqs) {
                    let record = event_record(&run.task, seq, task_seq, now, event)?;
                    self.observers.events([&record]);
                }
                return Ok(task);
            }
        }
        let tx = client.transaction().await.map_err(pg_error)?;
        // Task row first, then run row: the order every writer uses.
        let from = lock_task_status(&tx, &run.task).await?;
        check_run_held(&tx, run, worker).await?;
        check_finish(from, to)?;
        close_open_runs(&tx, &run.task, status_name(to), now).await?;
        let (task, event) = set_status(&tx, &run.task, to, result.as_deref(), now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&event);
        Ok(task)
    }

    async fn requeue_expired_impl(&self) -> Result<Vec<Requeued>, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let expired = query(
            &tx,
            "SELECT r.task_id, r.number FROM runs r JOIN tasks t ON t.id = r.task_id
             WHERE r.ended_at_ms IS NULL AND r.lease_expires_at_ms <= $1
               AND t.status IN ('running', 'testing')
             ORDER BY r.lease_expires_at_ms
             FOR NO KEY UPDATE OF t, r SKIP LOCKED",
            &[&now],
        )
        .await?;
        let (requeued, events) = interrupt_runs(&tx, &expired, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&events);
        Ok(requeued)
    }

    async fn interrupt_worker_runs_impl(&self, worker: &str) -> Result<Vec<Requeued>, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let held = query(
            &tx,
            "SELECT r.task_id, r.number FROM runs r JOIN tasks t ON t.id = r.task_id
             WHERE r.ended_at_ms IS NULL AND r.worker = $1
               AND t.status IN ('running', 'testing')
             ORDER BY r.started_at_ms
             FOR NO KEY UPDATE OF t, r",
            &[&worker],
        )
        .await?;
        let (requeued, events) = interrupt_runs(&tx, &held, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&events);
        Ok(requeued)
    }

    async fn pin_task_repos_impl(
        &self,
        run: &RunRef,
        worker: &str,
        repos: Vec<TaskRepo>,
    ) -> Result<Task, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        lock_task_status(&tx, &run.task).await?;
        check_run_held(&tx, run, worker).await?;
        let task = load_task(&tx, run.task.as_str())
            .await?
            .ok_or_else(|| not_found("task", run.task.as_str()))?;
        check_pinned_repos(&task.repos, &repos)?;
        let text = serde_json::to_string(&repos)?;
        let row = query_one(
            &tx,
            &format!(
                "UPDATE tasks SET repos = $2, updated_at_ms = $3 WHERE id = $1
                 RETURNING {TASK_COLUMNS}"
            ),
            &[&run.task.as_str(), &text, &now],
        )
        .await?;
        let task = read_task(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(task)
    }

    async fn register_repo_impl(&self, repo: NewRepo) -> Result<Repository, StoreError> {
        let now = self.now();
        let checks = serde_json::to_string(&repo.checks)?;
        let mounts = serde_json::to_string(&repo.mounts)?;
        let prepare = serde_json::to_string(&repo.prepare)?;
        let client = self.client().await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO repos (name, source, branch, checks, created_by, created_at_ms,
                                    mounts, prepare)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING
                 RETURNING {REPO_COLUMNS}"
            ),
            &[
                &repo.name,
                &repo.source,
                &repo.branch,
                &checks,
                &repo.created_by,
                &now,
                &mounts,
                &prepare,
            ],
        )
        .await?;
        match row {
            Some(row) => read_repo(&row),
            None => Err(StoreError::AlreadyExists {
                what: "repository",
                id: repo.name,
            }),
        }
    }

    async fn append_journal_impl(
        &self,
        run: &RunRef,
        entry: JournalEntry,
    ) -> Result<(), StoreError> {
        let number = i64::from(run.number);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // FOR SHARE: concurrent appends proceed to the chain check; closing the run waits.
        let ended = query_opt(
            &tx,
            "SELECT ended_at_ms FROM runs WHERE task_id = $1 AND number = $2 FOR SHARE",
            &[&run.task.as_str(), &number],
        )
        .await?
        .map(|row| get::<Option<i64>>(&row, 0))
        .transpose()?;
        check_journal_run(run, &entry, ended)?;
        let tail = query_opt(
            &tx,
            "SELECT seq, hash FROM journal WHERE task_id = $1 AND run_number = $2
             ORDER BY seq DESC LIMIT 1",
            &[&run.task.as_str(), &number],
        )
        .await?
        .map(|row| Ok::<_, StoreError>((get(&row, 0)?, get(&row, 1)?)))
        .transpose()?;
        check_journal_append(run, &entry, tail)?;
        match insert_journal(&tx, &run.task, number, &entry).await? {
            Ok(_) => {}
            // Another writer appended the same sequence number first: a fork, refused.
            Err(e) if has_code(&e, &SqlState::UNIQUE_VIOLATION) => {
                return Err(journal_fork(run, &entry))
            }
            Err(e) => return Err(pg_error(e)),
        }
        tx.commit().await.map_err(pg_error)
    }

    async fn append_event_impl(
        &self,
        task: &TaskId,
        event: Event,
    ) -> Result<EventRecord, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        require_task_exists(&tx, task).await?;
        let record = insert_event(&tx, task, event, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events([&record]);
        Ok(record)
    }

    async fn events_after_impl(
        &self,
        stream: &EventStream,
        after: u64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let after = to_i64(after)?;
        let limit = i64::from(limit);
        let client = self.client().await?;
        let rows = match stream {
            EventStream::Task(task) => {
                query(
                    &*client,
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE task_id = $1 AND task_seq > $2
                         ORDER BY task_seq LIMIT $3"
                    ),
                    &[&task.as_str(), &after, &limit],
                )
                .await?
            }
            EventStream::All => {
                query(
                    &*client,
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"
                    ),
                    &[&after, &limit],
                )
                .await?
            }
        };
        rows.iter().map(read_event).collect()
    }

    async fn record_usage_impl(&self, entry: UsageEntry) -> Result<(), StoreError> {
        let now = self.now();
        let client = self.client().await?;
        let run_number = entry.run_number.map(i64::from);
        let inserted = client
            .execute(
                "INSERT INTO usage_ledger (task_id, run_number, model, input_tokens,
                     cached_input_tokens, output_tokens, cost_micro_usd, at_ms, role)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &entry.task.as_str(),
                    &run_number,
                    &entry.model,
                    &to_i64(entry.input_tokens)?,
                    &to_i64(entry.cached_input_tokens)?,
                    &to_i64(entry.output_tokens)?,
                    &entry.cost_micro_usd.map(to_i64).transpose()?,
                    &now,
                    &entry.role,
                ],
            )
            .await;
        match inserted {
            Ok(_) => {
                self.observers.usage(&entry);
                Ok(())
            }
            Err(e) if has_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) => {
                Err(not_found("task", entry.task.as_str()))
            }
            Err(e) => Err(pg_error(e)),
        }
    }

    async fn create_approval_impl(&self, approval: NewApproval) -> Result<Approval, StoreError> {
        let now = self.now();
        let client = self.client().await?;
        require_task_exists(&*client, &approval.task).await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO approvals (id, task_id, kind, subject_hash, status, created_at_ms)
                 VALUES ($1, $2, $3, $4, 'pending', $5) ON CONFLICT (id) DO NOTHING
                 RETURNING {APPROVAL_COLUMNS}"
            ),
            &[
                &approval.id,
                &approval.task.as_str(),
                &approval.kind,
                &approval.subject_hash,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_approval(&row),
            None => Err(StoreError::AlreadyExists {
                what: "approval",
                id: approval.id,
            }),
        }
    }

    async fn settle_approval(
        &self,
        id: &str,
        subject_hash: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        decided_by: Option<&str>,
    ) -> Result<Approval, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let approval = load_approval(&tx, id, true)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        check_approval(&approval, subject_hash, expected)?;
        let sql = match to {
            ApprovalStatus::Consumed => format!(
                "UPDATE approvals SET status = $2, consumed_at_ms = $3 WHERE id = $1
                 RETURNING {APPROVAL_COLUMNS}"
            ),
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Rejected => {
                format!(
                    "UPDATE approvals SET status = $2, decided_at_ms = $3, decided_by = $4
                     WHERE id = $1 RETURNING {APPROVAL_COLUMNS}"
                )
            }
        };
        let row = match to {
            ApprovalStatus::Consumed => query_one(&tx, &sql, &[&id, &to.as_str(), &now]).await?,
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Rejected => {
                query_one(&tx, &sql, &[&id, &to.as_str(), &now, &decided_by]).await?
            }
        };
        let settled = read_approval(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(settled)
    }

    async fn enqueue_intent_impl(&self, intent: NewIntent) -> Result<Intent, StoreError> {
        let now = self.now();
        let payload = serde_json::to_string(&intent.payload)?;
        let client = self.client().await?;
        require_task_exists(&*client, &intent.task).await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO outbox (id, task_id, kind, payload, status, attempts,
                     next_attempt_at_ms, created_at_ms)
                 VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5) ON CONFLICT (id) DO NOTHING
                 RETURNING {INTENT_COLUMNS}"
            ),
            &[
                &intent.id,
                &intent.task.as_str(),
                &intent.kind,
                &payload,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_intent(&row),
            None => Err(StoreError::AlreadyExists {
                what: "outbox intent",
                id: intent.id,
            }),
        }
    }

    async fn claim_intent_impl(
        &self,
        worker: &str,
        lease: Duration,
        kinds: &[&str],
    ) -> Result<Option<Intent>, StoreError> {
        let now = self.now();
        let expires = now.saturating_add(duration_ms(lease));
        let client = self.client().await?;
        let row = query_opt(
            &*client,
            &format!(
                "UPDATE outbox SET lease_owner = $2, lease_expires_at_ms = $3,
                     attempts = attempts + 1
                 WHERE id = (
                     SELECT id FROM outbox
                     WHERE status = 'pending' AND next_attempt_at_ms <= $1
                       AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= $1)
                       AND kind = ANY($4)
                     ORDER BY next_attempt_at_ms, created_at_ms, id
                     LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING {INTENT_COLUMNS}"
            ),
            &[&now, &worker, &expires, &kinds],
        )
        .await?;
        row.as_ref().map(read_intent).transpose()
    }

    async fn complete_intent_impl(&self, id: &str, worker: &str) -> Result<Intent, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        held_intent(&tx, id, worker).await?;
        let row = query_one(
            &tx,
            &format!(
                "UPDATE outbox SET status = 'done', done_at_ms = $2, lease_expires_at_ms = NULL
                 WHERE id = $1 RETURNING {INTENT_COLUMNS}"
            ),
            &[&id, &now],
        )
        .await?;
        let done = read_intent(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(done)
    }

    async fn fail_intent_impl(
        &self,
        id: &str,
        worker: &str,
        error: &str,
        retry_at_ms: Option<i64>,
    ) -> Result<Intent, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let intent = held_intent(&tx, id, worker).await?;
        let (status, next) = intent_failure(&intent, retry_at_ms);
        let row = query_one(
            &tx,
            &format!(
                "UPDATE outbox SET status = $2, next_attempt_at_ms = $3, last_error = $4,
                     lease_owner = NULL, lease_expires_at_ms = NULL
                 WHERE id = $1 RETURNING {INTENT_COLUMNS}"
            ),
            &[&id, &status.as_str(), &next, &error],
        )
        .await?;
        let failed = read_intent(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(failed)
    }

    async fn create_api_token_impl(&self, token: NewApiToken) -> Result<ApiToken, StoreError> {
        let now = self.now();
        let client = self.client().await?;
        // No conflict target: a taken id and a taken digest both insert nothing.
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO api_tokens (id, name, role, digest, created_by, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
                 RETURNING {API_TOKEN_COLUMNS}"
            ),
            &[
                &token.id,
                &token.name,
                &token.role,
                &token.digest,
                &token.created_by,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_api_token(&row),
            None => Err(StoreError::AlreadyExists {
                what: "api token",
                id: token.id,
            }),
        }
    }

    async fn append_task_message_impl(
        &self,
        task: &TaskId,
        role: &str,
        text: &str,
        author: &str,
    ) -> Result<TaskMessage, StoreError> {
        check_message_role(role)?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        lock_task_status(&tx, task).await?;
        let message = insert_message(&tx, task, role, text, author, now).await?;
        tx.commit().await.map_err(pg_error)?;
        Ok(message)
    }

    async fn answer_task_impl(
        &self,
        task: &TaskId,
        text: &str,
        author: &str,
    ) -> Result<Task, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        check_status(
            task,
            TaskStatus::WaitingInput,
            lock_task_status(&tx, task).await?,
        )?;
        insert_message(&tx, task, MESSAGE_USER, text, author, now).await?;
        close_open_runs(&tx, task, status_name(TaskStatus::Queued), now).await?;
        let (answered, event) = set_status(&tx, task, TaskStatus::Queued, None, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&event);
        Ok(answered)
    }

    async fn usage_summary_impl(&self, query_: UsageQuery) -> Result<UsageSummary, StoreError> {
        let client = self.client().await?;
        let params: Params<'_> = &[&query_.owner, &query_.since_ms];
        // Floor division, so an instant before 1970 still lands on its own day.
        let day = format!(
            "(at_ms - (((at_ms % {MS_PER_DAY}) + {MS_PER_DAY}) % {MS_PER_DAY})) / {MS_PER_DAY}"
        );
        let days = query(
            &*client,
            &format!(
                "SELECT ({day})::BIGINT AS day, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY day ORDER BY day"
            ),
            params,
        )
        .await?;
        let tasks = query(
            &*client,
            &format!(
                "SELECT task_id, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY task_id ORDER BY task_id"
            ),
            params,
        )
        .await?;
        let models = query(
            &*client,
            &format!(
                "SELECT model, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY model ORDER BY model"
            ),
            params,
        )
        .await?;
        let roles = query(
            &*client,
            &format!(
                "SELECT role, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY role ORDER BY role"
            ),
            params,
        )
        .await?;
        Ok(UsageSummary {
            by_day: days
                .iter()
                .map(|row| Ok((UtcDay(get(row, 0)?), read_spend_at(row)?)))
                .collect::<Result<_, StoreError>>()?,
            by_task: tasks
                .iter()
                .map(|row| Ok((crate::rows::task_id(get(row, 0)?)?, read_spend_at(row)?)))
                .collect::<Result<_, StoreError>>()?,
            by_model: models
                .iter()
                .map(|row| Ok((get(row, 0)?, read_spend_at(row)?)))
                .collect::<Result<_, StoreError>>()?,
            by_role: roles
                .iter()
                .map(|row| Ok((get(row, 0)?, read_spend_at(row)?)))
                .collect::<Result<_, StoreError>>()?,
        })
    }
}

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

    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            // Two attempts: the second replays a concurrent request that won the key.
            for _ in 0..2 {
                if let Some(created) = self.create_task_once(&task, idempotency.as_ref()).await? {
                    return Ok(created);
                }
            }
            Err(StoreError::Database {
                backend: BACKEND,
                message: "idempotency key kept changing hands".into(),
                retryable: true,
                source: None,
            })
        })
    }

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_task(&*client, id.as_str()).await
        })
    }

    fn list_tasks(&self, query_: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let status = query_.status.map(status_name);
            let before = query_.before.as_ref().map(TaskId::as_str);
            let limit = i64::from(query_.limit);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {TASK_COLUMNS} FROM tasks
                     WHERE ($1::text IS NULL OR owner = $1) AND ($2::text IS NULL OR status = $2)
                       AND ($3::text IS NULL OR id < $3)
                     ORDER BY id DESC LIMIT $4"
                ),
                &[&query_.owner, &status, &before, &limit],
            )
            .await?;
            rows.iter().map(read_task).collect()
        })
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.transition_impl(id, from, to, result))
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        Box::pin(self.claim_impl(worker, lease, filter))
    }

    fn finish_and_claim<'a>(
        &'a self,
        completion: Completion,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<(Finished, Option<Claim>), StoreError>> {
        Box::pin(self.finish_and_claim_impl(completion, lease, filter))
    }

    fn claim_batch<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        Box::pin(self.claim_batch_impl(worker, lease, filter, max))
    }

    fn finish_runs(
        &self,
        completions: Vec<Completion>,
    ) -> BoxFuture<'_, Result<Vec<Result<Finished, StoreError>>, StoreError>> {
        Box::pin(self.finish_runs_impl(completions))
    }

    fn heartbeat<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        Box::pin(self.heartbeat_impl(run, worker, lease))
    }

    fn finish_run<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.finish_run_impl(run, worker, to, result))
    }

    fn requeue_expired(&self) -> BoxFuture<'_, Result<Vec<Requeued>, StoreError>> {
        Box::pin(self.requeue_expired_impl())
    }

    fn interrupt_worker_runs<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Requeued>, StoreError>> {
        Box::pin(self.interrupt_worker_runs_impl(worker))
    }

    fn pin_task_repos<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        repos: Vec<TaskRepo>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.pin_task_repos_impl(run, worker, repos))
    }

    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>> {
        Box::pin(self.register_repo_impl(repo))
    }

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!("SELECT {REPO_COLUMNS} FROM repos WHERE name = $1"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(read_repo)
            .transpose()
        })
    }

    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {REPO_COLUMNS} FROM repos ORDER BY name"),
                &[],
            )
            .await?
            .iter()
            .map(read_repo)
            .collect()
        })
    }

    fn list_runs<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Vec<Run>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = query(
                &*client,
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE task_id = $1 ORDER BY number"),
                &[&task.as_str()],
            )
            .await?;
            rows.iter().map(read_run).collect()
        })
    }

    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.append_journal_impl(run, entry))
    }

    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let number = i64::from(run.number);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal WHERE task_id = $1 AND run_number = $2
                     ORDER BY seq"
                ),
                &[&run.task.as_str(), &number],
            )
            .await?;
            rows.iter().map(read_journal).collect()
        })
    }

    fn journal_page<'a>(
        &'a self,
        run: &'a RunRef,
        from: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let number = i64::from(run.number);
            // Past i64 there is no record: an empty page.
            let from = i64::try_from(from).unwrap_or(i64::MAX);
            let limit = i64::from(limit);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal
                     WHERE task_id = $1 AND run_number = $2 AND seq >= $3
                     ORDER BY seq LIMIT $4"
                ),
                &[&run.task.as_str(), &number, &from, &limit],
            )
            .await?;
            rows.iter().map(read_journal).collect()
        })
    }

    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>> {
        Box::pin(self.append_event_impl(task, event))
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.events_after_impl(stream, after, limit))
    }

    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.record_usage_impl(entry))
    }

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = query_one(
                &*client,
                &format!("SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE task_id = $1"),
                &[&task.as_str()],
            )
            .await?;
            read_spend(&row)
        })
    }

    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = query_one(
                &*client,
                &format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE at_ms >= $1 AND at_ms < $2"
                ),
                &[&day.start_ms(), &day.end_ms()],
            )
            .await?;
            read_spend(&row)
        })
    }

    fn create_approval(
        &self,
        approval: NewApproval,
    ) -> BoxFuture<'_, Result<Approval, StoreError>> {
        Box::pin(self.create_approval_impl(approval))
    }

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_approval(&*client, id, false).await
        })
    }

    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let status = status.map(ApprovalStatus::as_str);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE ($1::text IS NULL OR status = $1)
                     ORDER BY created_at_ms, id"
                ),
                &[&status],
            )
            .await?;
            rows.iter().map(read_approval).collect()
        })
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        Box::pin(self.settle_approval(
            id,
            subject_hash,
            ApprovalStatus::Pending,
            decided_status(decision),
            Some(decided_by),
        ))
    }

    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        Box::pin(self.settle_approval(
            id,
            subject_hash,
            ApprovalStatus::Approved,
            ApprovalStatus::Consumed,
            None,
        ))
    }

    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>> {
        Box::pin(self.enqueue_intent_impl(intent))
    }

    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>> {
        Box::pin(self.claim_intent_impl(worker, lease, kinds))
    }

    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        Box::pin(self.complete_intent_impl(id, worker))
    }

    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        Box::pin(self.fail_intent_impl(id, worker, error, retry_at_ms))
    }

    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = query(
                &*client,
                &format!(
                    "SELECT {INTENT_COLUMNS} FROM outbox WHERE task_id = $1
                     ORDER BY created_at_ms, id"
                ),
                &[&task.as_str()],
            )
            .await?;
            rows.iter().map(read_intent).collect()
        })
    }

    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>> {
        Box::pin(self.create_api_token_impl(token))
    }

    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens
                     WHERE digest = $1 AND revoked_at_ms IS NULL"
                ),
                &[&digest],
            )
            .await?
            .as_ref()
            .map(read_api_token)
            .transpose()
        })
    }

    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {API_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at_ms, id"),
                &[],
            )
            .await?
            .iter()
            .map(read_api_token)
            .collect()
        })
    }

    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "UPDATE api_tokens SET revoked_at_ms = COALESCE(revoked_at_ms, $2)
                     WHERE id = $1 RETURNING {API_TOKEN_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?
            .as_ref()
            .map(read_api_token)
            .transpose()?
            .ok_or_else(|| not_found("api token", id))
        })
    }

    fn put_web_user<'a>(
        &'a self,
        name: &'a str,
        role: &'a str,
        password_hash: &'a str,
    ) -> BoxFuture<'a, Result<WebUser, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let row = query_one(
                &tx,
                &format!(
                    "INSERT INTO web_users (name, role, password_hash, created_at_ms, updated_at_ms)
                     VALUES ($1, $2, $3, $4, $4)
                     ON CONFLICT (name) DO UPDATE SET role = excluded.role,
                         password_hash = excluded.password_hash,
                         updated_at_ms = excluded.updated_at_ms
                     RETURNING {WEB_USER_COLUMNS}"
                ),
                &[&name, &role, &password_hash, &now],
            )
            .await?;
            let user = read_web_user(&row)?;
            revoke_password_sessions(&tx, name, now).await?;
            tx.commit().await.map_err(pg_error)?;
            Ok(user)
        })
    }

    fn find_web_user<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebUser>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!("SELECT {WEB_USER_COLUMNS} FROM web_users WHERE name = $1"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(read_web_user)
            .transpose()
        })
    }

    fn list_web_users(&self) -> BoxFuture<'_, Result<Vec<WebUser>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {WEB_USER_COLUMNS} FROM web_users ORDER BY name"),
                &[],
            )
            .await?
            .iter()
            .map(read_web_user)
            .collect()
        })
    }

    fn delete_web_user<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let deleted = execute(&tx, "DELETE FROM web_users WHERE name = $1", &[&name]).await?;
            if deleted == 0 {
                return Err(not_found("web user", name));
            }
            revoke_password_sessions(&tx, name, now).await?;
            tx.commit().await.map_err(pg_error)
        })
    }

    fn create_web_session(
        &self,
        session: NewWebSession,
    ) -> BoxFuture<'_, Result<WebSession, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let expires = now.saturating_add(duration_ms(session.lifetime));
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            execute(
                &tx,
                "DELETE FROM web_sessions WHERE expires_at_ms < $1 OR revoked_at_ms < $1",
                &[&now.saturating_sub(WEB_SESSION_RETENTION_MS)],
            )
            .await?;
            // No conflict target: a taken id and a taken digest both insert nothing.
            let row = query_opt(
                &tx,
                &format!(
                    "INSERT INTO web_sessions (id, digest, name, role_at_sign_in, credential,
                         address, user_agent, created_at_ms, expires_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING
                     RETURNING {WEB_SESSION_COLUMNS}"
                ),
                &[
                    &session.id,
                    &session.digest,
                    &session.name,
                    &session.role_at_sign_in,
                    &session.credential,
                    &session.address,
                    &session.user_agent,
                    &now,
                    &expires,
                ],
            )
            .await?;
            let Some(row) = row else {
                return Err(StoreError::AlreadyExists {
                    what: "web session",
                    id: session.id,
                });
            };
            let stored = read_web_session(&row)?;
            tx.commit().await.map_err(pg_error)?;
            Ok(stored)
        })
    }

    fn find_web_session<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebSession>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE digest = $1 AND revoked_at_ms IS NULL AND expires_at_ms > $2"
                ),
                &[&digest, &now],
            )
            .await?
            .as_ref()
            .map(read_web_session)
            .transpose()
        })
    }

    fn list_web_sessions<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<WebSession>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE revoked_at_ms IS NULL AND expires_at_ms > $1
                         AND ($2::TEXT IS NULL OR name = $2)
                     ORDER BY created_at_ms, id"
                ),
                &[&now, &name],
            )
            .await?
            .iter()
            .map(read_web_session)
            .collect()
        })
    }

    fn revoke_web_session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<WebSession, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "UPDATE web_sessions SET revoked_at_ms = COALESCE(revoked_at_ms, $2)
                     WHERE id = $1 RETURNING {WEB_SESSION_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?
            .as_ref()
            .map(read_web_session)
            .transpose()?
            .ok_or_else(|| not_found("web session", id))
        })
    }

    fn record_chat_update<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
        replies: Vec<NewChatMessage>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            execute(
                &tx,
                "INSERT INTO chat_offsets (channel, next_offset, updated_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (channel) DO UPDATE SET
                     next_offset = GREATEST(chat_offsets.next_offset, excluded.next_offset),
                     updated_at_ms = excluded.updated_at_ms",
                &[&channel, &update_id.saturating_add(1), &now],
            )
            .await?;
            let new = execute(
                &tx,
                "INSERT INTO chat_updates (channel, update_id, handled_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&channel, &update_id, &now],
            )
            .await?;
            if new > 0 {
                for reply in &replies {
                    insert_chat_message(&tx, reply, now).await?;
                }
            }
            tx.commit().await.map_err(pg_error)?;
            Ok(new > 0)
        })
    }

    fn chat_update_seen<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            Ok(query_opt(
                &*client,
                "SELECT 1 FROM chat_updates WHERE channel = $1 AND update_id = $2",
                &[&channel, &update_id],
            )
            .await?
            .is_some())
        })
    }

    fn chat_offset<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                "SELECT next_offset FROM chat_offsets WHERE channel = $1",
                &[&channel],
            )
            .await?
            .map(|row| get(&row, 0))
            .transpose()
        })
    }

    fn put_chat_message(
        &self,
        message: NewChatMessage,
    ) -> BoxFuture<'_, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            insert_chat_message(&tx, &message, now).await?;
            execute(
                &tx,
                "UPDATE chat_messages SET text = $2, markup = $3, revision = revision + 1,
                     next_attempt_at_ms = LEAST(next_attempt_at_ms, $4), updated_at_ms = $4
                 WHERE id = $1 AND (text IS DISTINCT FROM $2 OR markup IS DISTINCT FROM $3)
                   AND state <> 'failed'",
                &[&message.id, &message.text, &message.markup, &now],
            )
            .await?;
            let stored = load_chat_message(&tx, &message.id)
                .await?
                .ok_or_else(|| not_found("chat message", &message.id))?;
            tx.commit().await.map_err(pg_error)?;
            Ok(stored)
        })
    }

    fn get_chat_message<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_chat_message(&*client, id).await
        })
    }

    fn due_chat_messages<'a>(
        &'a self,
        channel: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatMessage>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages
                     WHERE channel = $1 AND next_attempt_at_ms <= $2
                       AND (state IN ('pending', 'sending')
                            OR (state = 'sent' AND revision > delivered_revision))
                     ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT $3"
                ),
                &[&channel, &now, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(read_chat_message)
            .collect()
        })
    }

    fn start_chat_send<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            let updated = query_opt(
                &*client,
                &format!(
                    "UPDATE chat_messages SET state = 'sending', attempts = attempts + 1,
                         updated_at_ms = $2
                     WHERE id = $1 AND state IN ('pending', 'sending')
                     RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?;
            match updated {
                Some(row) => read_chat_message(&row),
                None => {
                    let message = load_chat_message(&*client, id)
                        .await?
                        .ok_or_else(|| not_found("chat message", id))?;
                    Err(StoreError::InvalidData(format!(
                        "chat message {id} is {}, not waiting to be sent",
                        message.state.as_str()
                    )))
                }
            }
        })
    }

    fn chat_message_delivered<'a>(
        &'a self,
        id: &'a str,
        message_id: &'a str,
        revision: i64,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            let updated = query_opt(
                &*client,
                &format!(
                    "UPDATE chat_messages SET state = 'sent', message_id = $2,
                         delivered_revision = GREATEST(delivered_revision, $3), attempts = 0,
                         last_error = NULL, updated_at_ms = $4
                     WHERE id = $1 AND state <> 'failed'
                     RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &message_id, &revision, &now],
            )
            .await?;
            match updated {
                Some(row) => read_chat_message(&row),
                None => match load_chat_message(&*client, id).await? {
                    None => Err(not_found("chat message", id)),
                    Some(_) => Err(StoreError::InvalidData(format!(
                        "chat message {id} was given up on"
                    ))),
                },
            }
        })
    }

    fn chat_message_failed<'a>(
        &'a self,
        id: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let row = query_opt(
                &tx,
                &format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = $1 FOR UPDATE"
                ),
                &[&id],
            )
            .await?
            .ok_or_else(|| not_found("chat message", id))?;
            let message = read_chat_message(&row)?;
            let (state, next, delivered) = crate::checks::chat_failure(&message, retry_at_ms);
            let row = query_one(
                &tx,
                &format!(
                    "UPDATE chat_messages SET state = $2, next_attempt_at_ms = $3,
                         delivered_revision = $4, last_error = $5, updated_at_ms = $6
                     WHERE id = $1 RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &state.as_str(), &next, &delivered, &error, &now],
            )
            .await?;
            let updated = read_chat_message(&row)?;
            tx.commit().await.map_err(pg_error)?;
            Ok(updated)
        })
    }

    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>> {
        Box::pin(self.append_task_message_impl(task, role, text, author))
    }

    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE task_id = $1 ORDER BY seq"
                ),
                &[&task.as_str()],
            )
            .await?
            .iter()
            .map(read_message)
            .collect()
        })
    }

    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.answer_task_impl(task, text, author))
    }

    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>> {
        Box::pin(self.usage_summary_impl(query))
    }

    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = query(
                &*client,
                "SELECT status, COUNT(*) FROM tasks GROUP BY status",
                &[],
            )
            .await?;
            let mut counted = Vec::new();
            for row in &rows {
                let name: String = get(row, 0)?;
                let count: i64 = get(row, 1)?;
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
