//! The durable task store: tasks and their state machine, the claim queue with leases, run
//! journals, event streams, the usage ledger, approvals, idempotency keys and the outbox of
//! side-effect intents — behind one object-safe async trait, [`Store`], with an embedded SQLite
//! backend (the default under `WARDEN_HOME`) and a Postgres backend (many workers on many
//! machines). Both pass the same conformance suite (`tests/suite`).
//!
//! [`Store`] joins one trait per domain ([`TaskStore`], [`QueueStore`], [`JournalRecordStore`],
//! [`EventStore`], [`LedgerStore`], [`RepoRegistry`], [`ApprovalStore`], [`OutboxStore`],
//! [`TokenStore`], [`WebAccountStore`], [`ChatStore`], [`ConversationStore`],
//! [`ReportStore`]); callers hold an `Arc<dyn Store>` and call any of their methods (on a
//! concrete backend, `use warden_store::prelude::*`). Each backend has a file per domain
//! (`sqlite/tasks.rs`, `postgres/queue.rs`, …) with its trait's implementation and the helpers
//! only it uses; `mod.rs` keeps the connection, the shared statements and the row readers, which
//! read a row's columns by name (a row holding two tasks names the second's `next_id`, …).
//!
//! **API Boundary:** [`open`] and the [`Store`] trait; the backends' own types are public only
//! for their constructors. Every timestamp comes from the injected [`Clock`]. A store tells
//! the [`StoreObserver`]s registered with it what it committed (events, claims, ledger
//! entries), so nothing needs to wrap it to watch. Decisions both backends make on what they
//! read (is the lease held, may the task move, is the intent still this worker's) live once,
//! in `checks`; only the SQL differs.

#![warn(unreachable_pub)]
mod batch;
mod checks;
mod clock;
mod error;
mod ids;
pub mod journal;
mod observer;
mod postgres;
mod rows;
mod sqlite;
pub mod state;
mod types;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use warden_protocol::{Event, TaskId, TaskStatus};

pub use batch::{ClaimQueue, Completion, CompletionBatcher, Finished, LeasedClaim};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use ids::{new_task_id, new_task_id_at, IdError};
pub use journal::{JournalEntry, JournalStore, RunJournal, GENESIS_HASH};
pub use observer::StoreObserver;
pub use postgres::{postgres_migrations, PostgresStore};
pub use sqlite::{backup_sqlite, sqlite_migrations, Quarantine, SqliteStore};
pub use state::{transition_allowed, ABANDONED, MAX_INTERRUPTED_RUNS};
pub use types::{
    ApiToken, Approval, ApprovalStatus, Claim, ClaimFilter, Created, Decision, EventRecord,
    EventStream, IdempotencyKey, Intent, IntentStatus, NewApiToken, NewApproval, NewIntent,
    NewRepo, NewTask, Repository, Requeued, Run, RunRef, Spend, Task, TaskMessage, TaskQuery,
    TaskRepo, UsageEntry, UsageQuery, UsageSummary, MESSAGE_AGENT, MESSAGE_STEER, MESSAGE_USER,
    RUN_INTERRUPTED,
};
pub use types::{ChatMessage, ChatMessageState, NewChatMessage};
pub use types::{NewWebSession, WebSession, WebUser, WEB_CREDENTIAL_PASSWORD};
pub use warden_time::UtcDay;

/// The store's traits, for calling their methods on a concrete backend:
/// `use warden_store::prelude::*;` (a `dyn Store` needs none).
pub mod prelude {
    pub use crate::{
        ApprovalStore, ChatStore, ConversationStore, EventStore, JournalRecordStore, LedgerStore,
        OutboxStore, QueueStore, RepoRegistry, ReportStore, Store, TaskStore, TokenStore,
        WebAccountStore,
    };
}

/// A boxed, sendable future: keeps [`Store`] object-safe without an extra crate.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything Warden keeps durably. Every method is one transaction: it happens entirely or not
/// at all, and concurrent callers (threads, processes, machines) see each other's effects in a
/// single order.
///
/// Every move of a task to a terminal status (a run finishing, a cancel, a task abandoned after
/// too many interrupted runs), and every run that hands its task to people (waiting for an
/// answer or an approval), stores the task's `task_finished` event (its status and the
/// result's `outcome`, else `failure`) in the same transaction; callers never append it.
pub trait Store:
    TaskStore
    + QueueStore
    + JournalRecordStore
    + EventStore
    + LedgerStore
    + RepoRegistry
    + ApprovalStore
    + OutboxStore
    + TokenStore
    + WebAccountStore
    + ChatStore
    + ConversationStore
    + ReportStore
    + Send
    + Sync
{
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    /// Things the operator should know about the database, such as a corrupt file that was
    /// moved aside at open.
    fn notices(&self) -> Vec<String>;

    /// Full consistency check (`PRAGMA integrity_check` on SQLite; a round trip on Postgres).
    fn check_integrity(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Registers `observer` to hear of every event, claim and ledger entry this store object
    /// (and its clones) commits from now on, right after each commit (see [`StoreObserver`]).
    /// Held weakly: it hears while something else keeps it alive. Registered twice, it hears
    /// everything twice.
    fn add_observer(&self, observer: Weak<dyn StoreObserver>);
}

/// Tasks: created, read, listed and moved between statuses (compare-and-set).
pub trait TaskStore: Send + Sync {
    /// Stores a new `queued` task. With an idempotency key seen before for the same owner:
    /// the earlier task if the request hash matches, else [`StoreError::IdempotencyConflict`].
    /// A `retry_of` must name a terminal task; a `follow_up_to` must exist.
    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>>;

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>>;

    /// Newest first, `query.limit` at most.
    fn list_tasks(&self, query: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>>;

    /// Compare-and-set of a task's status, validated against [`transition_allowed`]: fails
    /// with [`StoreError::StatusConflict`] if the task is not `from`. Sets `result` when given.
    /// Moving to `queued` or a terminal status ends the task's open run (its heartbeats then
    /// fail with [`StoreError::LeaseLost`]); moving to `running` or `testing` needs an open run
    /// (queued tasks start through [`QueueStore::claim`]).
    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>>;
}

/// The queue: claiming queued tasks under leases, heartbeats, finishing runs, re-queueing what lost
/// its lease, and a task's runs.
pub trait QueueStore: Send + Sync {
    /// Atomically takes the best queued task (highest priority, then oldest) that `filter`
    /// admits and whose repositories are not held by another running change or maintain task,
    /// marks it `running` and opens a new run leased to `worker` for `lease`. `None` when
    /// nothing is claimable. Call once per free slot.
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>>;

    /// Extends the run's lease to now + `lease`; returns the new expiry.
    /// [`StoreError::LeaseLost`] when the run has ended or is not `worker`'s.
    fn heartbeat<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<i64, StoreError>>;

    /// Ends `worker`'s run and moves its (running or testing) task to `to` in one transaction:
    /// a terminal status, a waiting status (the worker lets go while a human answers), or
    /// `queued` (released, e.g. at shutdown; not counted as an interruption).
    fn finish_run<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>>;

    /// Ends `completion.run` like [`QueueStore::finish_run`] (the same checks, the same errors, the
    /// same `task_finished` event, and nothing claimed when a check fails) and claims the next task
    /// like [`QueueStore::claim`], in one transaction. Except: on Postgres a change or maintain
    /// task that comes next is claimed in a second transaction (under its repositories' locks), and
    /// if that claim fails the run stays finished and the claim is `None` (the task stays queued).
    /// The default does the finish through [`QueueStore::finish_runs`] and the claim in a second
    /// transaction.
    fn finish_and_claim<'a>(
        &'a self,
        completion: Completion,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<(Finished, Option<Claim>), StoreError>> {
        Box::pin(async move {
            let worker = completion.worker.clone();
            let finished = batch::single(self.finish_runs(vec![completion]).await?)?;
            let claim = self.claim(&worker, lease, filter).await?;
            Ok((finished, claim))
        })
    }

    /// Claims up to `max` tasks for `worker` as [`QueueStore::claim`] would one by one (best first,
    /// each with a new run leased for `lease`), in as few transactions as the backend can.
    /// Fewer (or none) when fewer are claimable. Each claim's lease runs from now: a process
    /// that queues claims must start or renew them in time (see [`ClaimQueue`]); if it dies
    /// they come back through [`QueueStore::requeue_expired`] like any crashed run.
    fn claim_batch<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        Box::pin(async move {
            let mut claims = Vec::new();
            while claims.len() < max {
                match self.claim(worker, lease, filter).await? {
                    Some(claim) => claims.push(claim),
                    None => break,
                }
            }
            Ok(claims)
        })
    }

    /// Ends many runs, each exactly as [`QueueStore::finish_run`] would (a terminal or waiting
    /// status stores its `task_finished` event in the transaction that ends the run), in one
    /// transaction when every check passes (Postgres: one statement). One outcome per completion,
    /// in order: a completion whose check fails ([`StoreError::LeaseLost`],
    /// [`StoreError::InvalidTransition`], …) changes nothing and does not fail the others (on
    /// Postgres such rows are re-checked in a second transaction, so one may also fail alone with a
    /// database error). `Err` when nothing was written. Backends implement it; a wrapping store
    /// must forward it (the default refuses with [`StoreError::Unsupported`], so a wrapper cannot
    /// silently split the transaction).
    fn finish_runs(
        &self,
        completions: Vec<Completion>,
    ) -> BoxFuture<'_, Result<Vec<Result<Finished, StoreError>>, StoreError>> {
        let _ = completions;
        Box::pin(async { Err(StoreError::Unsupported("finish_runs")) })
    }

    /// Ends every run of a running or testing task whose lease expired by the store clock's
    /// now, as [`RUN_INTERRUPTED`]; its task goes back to `queued`, or fails with
    /// [`ABANDONED`] once [`MAX_INTERRUPTED_RUNS`] runs were interrupted.
    fn requeue_expired(&self) -> BoxFuture<'_, Result<Vec<Requeued>, StoreError>>;

    /// Ends every open run held by `worker` as [`RUN_INTERRUPTED`], like
    /// [`QueueStore::requeue_expired`] does for expired leases, whatever their leases say. For a
    /// worker that restarts under the same name after a crash: its old runs cannot be alive.
    fn interrupt_worker_runs<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Requeued>, StoreError>>;

    /// Records the commits `worker`'s run pinned its task's repositories to, so every later run
    /// of the task uses the same ones. `repos` must be the task's repositories (same names and
    /// revisions, same order) with `commit` set; a commit already recorded cannot change.
    fn pin_task_repos<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        repos: Vec<TaskRepo>,
    ) -> BoxFuture<'a, Result<Task, StoreError>>;

    /// A task's runs, oldest first.
    fn list_runs<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Vec<Run>, StoreError>>;
}

/// Each run's hash-chained journal: appended, read whole or a page at a time.
pub trait JournalRecordStore: Send + Sync {
    /// Appends one record to an open run's journal, checking in the same transaction that it
    /// continues the stored chain (next sequence, previous hash, content hash); anything else
    /// is a [`StoreError::JournalConflict`], so two writers cannot fork a chain.
    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// A run's journal, in order.
    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>>;

    /// Up to `limit` records of a run's journal from sequence `from` on, in order (a page of
    /// `GET /v1/tasks/{id}/journal`). The backends read just those rows; this default reads the
    /// whole run.
    fn journal_page<'a>(
        &'a self,
        run: &'a RunRef,
        from: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        Box::pin(async move {
            let mut entries = self.journal(run).await?;
            entries.retain(|entry| entry.seq >= from);
            entries.truncate(limit as usize);
            Ok(entries)
        })
    }
}

/// The event stream: every task's events, in one order and in each task's.
pub trait EventStore: Send + Sync {
    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>>;

    /// Events after sequence `after` (0 for the beginning) of `stream`, oldest first.
    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>>;
}

/// The usage ledger (append-only): model calls' tokens and cost, summed per task and per day.
pub trait LedgerStore: Send + Sync {
    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>>;

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>>;

    /// Spend recorded during one UTC day (by the store clock).
    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>>;
}

/// Registered repositories, by name.
pub trait RepoRegistry: Send + Sync {
    /// Registers a repository; [`StoreError::AlreadyExists`] when the name is taken.
    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>>;

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>>;

    /// Every registered repository, by name.
    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>>;
}

/// Approvals bound to the hash of what they approve, decided once and consumed once.
pub trait ApprovalStore: Send + Sync {
    fn create_approval(&self, approval: NewApproval)
        -> BoxFuture<'_, Result<Approval, StoreError>>;

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>>;

    /// Approvals in `status` (all when `None`), oldest first.
    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>>;

    /// Decides a pending approval, once. `subject_hash` must be the one it is bound to.
    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>>;

    /// Uses an approved approval for the action it is bound to, exactly once.
    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>>;
}

/// The outbox of side effects (push, pull request, callback): recorded before they start, claimed
/// under leases, completed or failed.
pub trait OutboxStore: Send + Sync {
    /// Records a side-effect intent, `pending` and due now.
    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>>;

    /// Takes the oldest due pending intent of one of `kinds` that no live lease holds, leasing
    /// it to `worker`. Each consumer names the kinds it performs, so none claims (and delays)
    /// another's intents; an empty `kinds` claims nothing.
    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>>;

    /// Marks `worker`'s claimed intent done. Succeeds exactly once per intent.
    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>>;

    /// Records a failed attempt: pending again at `retry_at_ms`, or `failed` for good when
    /// `None`.
    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>>;

    /// A task's intents, oldest first (crash reconciliation).
    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>>;
}

/// API tokens, kept as digests.
pub trait TokenStore: Send + Sync {
    /// Stores a token; [`StoreError::AlreadyExists`] when its id or its digest is taken.
    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>>;

    /// The unrevoked token with this digest (lowercase hex SHA-256 of the secret).
    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>>;

    /// Every token, revoked ones included, oldest first.
    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>>;

    /// Revokes a token for good; revoking it again changes nothing and returns it.
    /// [`StoreError::NotFound`] for an unknown id.
    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>>;
}

/// The web console's users (password hashes) and sessions (cookie digests).
pub trait WebAccountStore: Send + Sync {
    /// Creates the web user `name`, or replaces its role and password hash (keeping its
    /// creation time). In the same transaction, every unrevoked session that user signed in
    /// with a password is revoked: a new password ends the old ones' sessions.
    fn put_web_user<'a>(
        &'a self,
        name: &'a str,
        role: &'a str,
        password_hash: &'a str,
    ) -> BoxFuture<'a, Result<WebUser, StoreError>>;

    fn find_web_user<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebUser>, StoreError>>;

    /// Every web user, by name.
    fn list_web_users(&self) -> BoxFuture<'_, Result<Vec<WebUser>, StoreError>>;

    /// Deletes the web user and, in the same transaction, revokes the sessions it signed in
    /// with its password. [`StoreError::NotFound`] for an unknown name.
    fn delete_web_user<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Stores a session expiring `session.lifetime` after the store clock's now;
    /// [`StoreError::AlreadyExists`] when its id or digest is taken. In the same transaction,
    /// sessions that expired or were revoked more than a day ago are deleted.
    fn create_web_session(
        &self,
        session: NewWebSession,
    ) -> BoxFuture<'_, Result<WebSession, StoreError>>;

    /// The active session (unrevoked, unexpired at the store clock's now) with this digest.
    fn find_web_session<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebSession>, StoreError>>;

    /// Active sessions, oldest first; only `name`'s when given.
    fn list_web_sessions<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<WebSession>, StoreError>>;

    /// Revokes a session; revoking it again changes nothing and returns it.
    /// [`StoreError::NotFound`] for an unknown (or already deleted) id.
    fn revoke_web_session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<WebSession, StoreError>>;
}

/// The chat interfaces' state: updates seen, the polling offset, and outbound messages with their
/// delivery.
pub trait ChatStore: Send + Sync {
    /// Records that `channel`'s update `update_id` was handled, together with its `replies`,
    /// in one transaction, and moves the channel's polling offset past it. `false` (and
    /// nothing recorded but the offset) when the update was recorded before: a replay.
    /// Replies whose id exists already are left as they are.
    fn record_chat_update<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
        replies: Vec<NewChatMessage>,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Whether `channel`'s update `update_id` was recorded.
    fn chat_update_seen<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The offset to poll `channel` from: one past the highest update recorded.
    fn chat_offset<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Stores `message`, due now; when its id exists with another text or markup, replaces
    /// them and bumps its revision (an edit due now). The same text again changes nothing.
    fn put_chat_message(
        &self,
        message: NewChatMessage,
    ) -> BoxFuture<'_, Result<ChatMessage, StoreError>>;

    fn get_chat_message<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatMessage>, StoreError>>;

    /// `channel`'s messages with something due at the store clock's now (a send, a send whose
    /// outcome was not recorded, or an edit), oldest first, at most `limit`.
    fn due_chat_messages<'a>(
        &'a self,
        channel: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatMessage>, StoreError>>;

    /// Durably notes that a send of message `id` starts (`pending` → `sending`; attempts + 1),
    /// before the request leaves.
    fn start_chat_send<'a>(&'a self, id: &'a str)
        -> BoxFuture<'a, Result<ChatMessage, StoreError>>;

    /// The channel accepted `revision` of message `id` as `message_id`: `sent`.
    fn chat_message_delivered<'a>(
        &'a self,
        id: &'a str,
        message_id: &'a str,
        revision: i64,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>>;

    /// The channel refused the attempt (it holds nothing new): due again at `retry_at_ms` (a
    /// `sending` message back to `pending`), or given up when `None` (a message never sent
    /// `failed`; a sent one keeps what it shows and drops the edit).
    fn chat_message_failed<'a>(
        &'a self,
        id: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>>;
}

/// A task's conversation: questions asked, answers and messages given.
pub trait ConversationStore: Send + Sync {
    /// Appends a message (`role` is [`MESSAGE_USER`], [`MESSAGE_AGENT`] or [`MESSAGE_STEER`], else
    /// [`StoreError::InvalidData`]) to an existing task's conversation.
    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>>;

    /// A task's conversation, oldest first (empty for an unknown task).
    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>>;

    /// Answers a `waiting_input` task in one transaction: appends the `user` message and moves
    /// the task to `queued` (ending any run still open) so a worker claims it again.
    /// [`StoreError::StatusConflict`] when the task is not waiting for input.
    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>>;
}

/// Reports over everything: usage summaries and tasks per status.
pub trait ReportStore: Send + Sync {
    /// Ledger spend per UTC day, per task and per model, filtered by `query`.
    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>>;

    /// The number of tasks in every status (zeros included), in [`state::ALL_STATUSES`] order.
    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>>;
}

/// How a store is opened.
#[derive(Clone)]
pub struct StoreOptions {
    pub clock: Arc<dyn Clock>,
    /// Postgres connections kept per process.
    pub postgres_pool_size: usize,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            clock: Arc::new(SystemClock),
            postgres_pool_size: 16,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("postgres_pool_size", &self.postgres_pool_size)
            .finish_non_exhaustive()
    }
}

/// Opens the store `database_url` names: `sqlite://PATH` (created, migrated; a corrupt file is
/// moved aside, see [`Store::notices`]) or `postgres://…` / `postgresql://…` (migrated under an
/// advisory lock).
pub async fn open(database_url: &str) -> Result<Arc<dyn Store>, StoreError> {
    open_with(database_url, StoreOptions::default()).await
}

/// [`open`] with a clock and pool size.
pub async fn open_with(
    database_url: &str,
    options: StoreOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(StoreError::InvalidUrl(database_url.to_string()));
        }
        let store = SqliteStore::open_with(std::path::Path::new(path), options).await?;
        Ok(Arc::new(store))
    } else if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        let store = PostgresStore::connect_with(database_url, options).await?;
        Ok(Arc::new(store))
    } else {
        Err(StoreError::InvalidUrl(redact_url(database_url)))
    }
}

/// A URL without its password, for messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_messages_hide_passwords() {
        assert_eq!(
            redact_url("mysql://u:secret@host/db"),
            "mysql://u:***@host/db"
        );
        assert_eq!(redact_url("mysql://host/db"), "mysql://host/db");
    }
}
