//! [`QueueStore`] on SQLite (one file per domain; the connection, the writer and the row readers
//! are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl QueueStore for SqliteStore {
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
                            "SELECT r.task_id AS task_id, r.number AS number FROM runs r
                         JOIN tasks t ON t.id = r.task_id
                         WHERE r.ended_at_ms IS NULL AND r.lease_expires_at_ms <= ?1
                           AND t.status IN ('running', 'testing')
                         ORDER BY r.lease_expires_at_ms",
                        )
                        .db()?;
                    let rows = statement
                        .query_map([now], |row| Ok((row.get("task_id")?, row.get("number")?)))
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
                            "SELECT r.task_id AS task_id, r.number AS number FROM runs r
                         JOIN tasks t ON t.id = r.task_id
                         WHERE r.ended_at_ms IS NULL AND r.worker = ?1
                           AND t.status IN ('running', 'testing')
                         ORDER BY r.started_at_ms",
                        )
                        .db()?;
                    let rows = statement
                        .query_map([worker], |row| {
                            Ok((row.get("task_id")?, row.get("number")?))
                        })
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
}

fn read_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        task_id: row.get("task_id")?,
        number: row.get("number")?,
        worker: row.get("worker")?,
        started_at_ms: row.get("started_at_ms")?,
        heartbeat_at_ms: row.get("heartbeat_at_ms")?,
        lease_expires_at_ms: row.get("lease_expires_at_ms")?,
        ended_at_ms: row.get("ended_at_ms")?,
        outcome: row.get("outcome")?,
    })
}

/// Fails unless the run is open and `worker`'s.
fn check_run_held(conn: &Connection, run: &RunRef, worker: &str) -> Result<(), StoreError> {
    let row: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT worker, ended_at_ms FROM runs WHERE task_id = ?1 AND number = ?2")
        .db()?
        .query_row(params![run.task.as_str(), run.number], |row| {
            Ok((row.get("worker")?, row.get("ended_at_ms")?))
        })
        .optional()
        .db()?;
    crate::checks::check_run_held(run, worker, row)
}

fn exclusive_kinds() -> String {
    name_list(exclusive_kind_names())
}

/// Claims the best claimable task (see [`QueueStore::claim`]) inside the caller's write. `kinds`
/// and the exclusive kinds are `name_list`s.
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

/// Tells the observers the events interrupted runs stored (the `task_finished` of an abandoned
/// task).
fn tell_interrupted(
    observers: &Observers,
    (requeued, events): (Vec<Requeued>, Vec<EventRecord>),
) -> Vec<Requeued> {
    observers.events(&events);
    requeued
}
