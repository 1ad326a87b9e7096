//! [`QueueStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl QueueStore for PostgresStore {
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
}

impl PostgresStore {
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
        // A terminal or waiting status stores its `task_finished` event in the same
        // statement; its outcome comes from the result, so without one the transaction below
        // reads it.
        let event = match (&result_value, announces_finish(to)) {
            (Some(value), true) => Some(finished_event(to, Some(value))),
            _ => None,
        };
        let finished = event.as_ref().map(serde_json::to_string).transpose()?;
        if !is_active(to) && (finished.is_some() || !announces_finish(to)) {
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
                     RETURNING {CLAIMED_COLUMNS}, (SELECT seq FROM event) AS event_seq,
                         (SELECT task_seq FROM event) AS event_task_seq"
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
                let seqs: (Option<i64>, Option<i64>) =
                    (get(&row, "event_seq")?, get(&row, "event_task_seq")?);
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
        let id = crate::rows::task_id(get(row, "task_id")?)?;
        let number: i64 = get(row, "number")?;
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
             SELECT candidate.id AS candidate_id, claimed.* FROM candidate
             LEFT JOIN claimed ON claimed.id = candidate.id"
        ),
        &[&kinds, &exclusive, &now, &worker, &expires, &limit, &only],
    )
    .await?;
    let mut claims = Vec::with_capacity(rows.len());
    let mut passed_over = false;
    for row in &rows {
        // A candidate another worker's statement claimed first: no row of `claimed`.
        if get::<Option<String>>(row, "id")?.is_none() {
            passed_over = true;
            continue;
        }
        let task = read_task(row)?;
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
    let id: String = get(&candidate, "id")?;
    let kind: String = get(&candidate, "kind")?;
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
    // A terminal or waiting status stores its `task_finished`, whose outcome comes from the
    // result: without one the transaction path reads the stored result (as `finish_run` does).
    if announces_finish(to) && completion.result.is_none() {
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
    // The claimed task's columns, named apart from the finished one's.
    let next = prefixed_task_columns("claimed", "next_");
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
             SELECT (SELECT COALESCE(array_agg(seq ORDER BY seq), '{{}}') FROM inserted) AS seqs,
                 (SELECT COALESCE(array_agg(task_seq ORDER BY seq), '{{}}') FROM inserted)
                     AS task_seqs,
                 EXISTS (SELECT 1 FROM candidate) AND NOT EXISTS (SELECT 1 FROM claimed)
                     AS passed_over,
                 finished.*, {next}
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
    let seqs: Vec<i64> = get(&row, "seqs")?;
    let task_seqs: Vec<i64> = get(&row, "task_seqs")?;
    let passed_over: bool = get(&row, "passed_over")?;
    let task = read_task(&row)?;
    let claim = match get::<Option<String>>(&row, "next_id")? {
        Some(_) => {
            let next = read_task_named(&row, "next_")?;
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
    if announces_finish(to) {
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
    // A terminal or waiting completion without a result is left to the transaction path: its
    // event's outcome comes from the stored result (as `finish_run` does).
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
                    .push(!(announces_finish(completion.status) && completion.result.is_none()));
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
                      WHERE i.task_id = f.id) AS seqs,
                     (SELECT COALESCE(array_agg(i.task_seq ORDER BY i.seq), '{{}}') FROM inserted i
                      WHERE i.task_id = f.id) AS task_seqs
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
        let ord: i64 = get(row, "ord")?;
        let i = usize::try_from(ord)
            .ok()
            .filter(|i| *i < completions.len())
            .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown row"))?;
        let task = read_task(row)?;
        let seqs: Vec<i64> = get(row, "seqs")?;
        let task_seqs: Vec<i64> = get(row, "task_seqs")?;
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

/// The first outcome's error (the caller checked there is one).
fn single_ended(ended: Vec<Ended>) -> StoreError {
    match ended.into_iter().next() {
        Some(Err(error)) => error,
        Some(Ok(_)) | None => StoreError::invalid_data("finish_runs returned no outcome"),
    }
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
            let seq: i64 = get(row, "seq")?;
            let slot = usize::try_from(seq - base - 1)
                .ok()
                .and_then(|i| sequences.get_mut(i))
                .ok_or_else(|| StoreError::invalid_data("finish_runs: unknown event"))?;
            *slot = (seq, get::<i64>(row, "task_seq")?);
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
