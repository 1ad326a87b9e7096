//! A store's observers hear every event it commits (appended, or stored with a run's end, a
//! cancel or an abandoned task), every run it starts and every ledger entry it records — each
//! exactly once, after the commit — and nothing of a write that failed or of another handle's
//! commits.

use std::sync::{Arc, Mutex, Weak};

use serde_json::json;
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_store::{
    Claim, ClaimFilter, Completion, EventRecord, EventStream, RunRef, Store, StoreError,
    StoreObserver, UsageEntry, MAX_INTERRUPTED_RUNS,
};

use super::harness::{task_id, Fixture, LEASE};

/// What an observer heard, in order.
#[derive(Default)]
struct Heard {
    events: Mutex<Vec<EventRecord>>,
    runs: Mutex<Vec<RunRef>>,
    usage: Mutex<Vec<UsageEntry>>,
}

impl StoreObserver for Heard {
    fn event_stored(&self, record: &EventRecord) {
        self.events.lock().unwrap().push(record.clone());
    }

    fn run_started(&self, claim: &Claim) {
        self.runs.lock().unwrap().push(claim.run());
    }

    fn usage_recorded(&self, entry: &UsageEntry) {
        self.usage.lock().unwrap().push(entry.clone());
    }
}

impl Heard {
    fn register(store: &Arc<dyn Store>) -> Arc<Heard> {
        let heard = Arc::new(Heard::default());
        let observer: Arc<dyn StoreObserver> = heard.clone();
        let weak: Weak<dyn StoreObserver> = Arc::downgrade(&observer);
        store.add_observer(weak);
        heard
    }

    fn events(&self) -> Vec<EventRecord> {
        self.events.lock().unwrap().clone()
    }

    fn runs(&self) -> Vec<RunRef> {
        self.runs.lock().unwrap().clone()
    }

    fn usage(&self) -> Vec<UsageEntry> {
        self.usage.lock().unwrap().clone()
    }
}

fn message(text: &str) -> Event {
    Event::AgentMessage { text: text.into() }
}

fn usage(task: &TaskId) -> UsageEntry {
    UsageEntry {
        task: task.clone(),
        run_number: None,
        model: "gpt-x".into(),
        role: "agent".into(),
        input_tokens: 10,
        cached_input_tokens: 0,
        output_tokens: 3,
        cost_micro_usd: Some(5),
    }
}

async fn claim_of(f: &Fixture, task: &TaskId) -> Claim {
    let claim = f.claim("w1").await.unwrap();
    assert_eq!(claim.task.id, *task);
    claim
}

async fn an_observer_hears_every_commit_exactly_once(f: &Fixture) {
    let heard = Heard::register(&f.store);
    let answer = || Some(json!({"outcome": "answer"}));
    let mut tasks = Vec::new();

    // Appended, then cancelled while queued (its `task_finished` stored by the cancel).
    let cancelled = f.task(TaskKind::Question, &["app"]).await;
    tasks.push(cancelled.id.clone());
    f.store
        .append_event(&cancelled.id, message("one"))
        .await
        .unwrap();
    f.store
        .transition(
            &cancelled.id,
            TaskStatus::Queued,
            TaskStatus::Cancelled,
            Some(json!({"outcome": "failure"})),
        )
        .await
        .unwrap();

    // Runs finished one by one, with a result and without (Postgres: one statement, and the
    // transaction that reads the stored result).
    for result in [answer(), None] {
        let task = f.task(TaskKind::Question, &["app"]).await;
        tasks.push(task.id.clone());
        let claim = claim_of(f, &task.id).await;
        f.store
            .append_event(&task.id, message("working"))
            .await
            .unwrap();
        f.store.record_usage(usage(&task.id)).await.unwrap();
        f.store
            .finish_run(&claim.run(), "w1", TaskStatus::Completed, result)
            .await
            .unwrap();
    }

    // Runs finished together, one of the completions refused (a lost lease).
    let mut completions = Vec::new();
    for status in [TaskStatus::Completed, TaskStatus::Failed] {
        let task = f.task(TaskKind::Question, &["app"]).await;
        tasks.push(task.id.clone());
        let claim = claim_of(f, &task.id).await;
        let result = (status == TaskStatus::Completed).then(answer).flatten();
        completions.push(Completion::new(claim.run(), "w1", status, result));
    }
    let last = completions[1].run.clone();
    completions.push(Completion::new(last, "w2", TaskStatus::Completed, answer()));
    let outcomes = f.store.finish_runs(completions).await.unwrap();
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok());
    assert!(outcomes[2].is_err());

    // A run finished as the next task is claimed, the next one parked and answered (no event).
    let first = f.task(TaskKind::Question, &["app"]).await;
    tasks.push(first.id.clone());
    let claim = claim_of(f, &first.id).await;
    let next = f.task(TaskKind::Question, &["app"]).await;
    tasks.push(next.id.clone());
    let (finished, claimed) = f
        .store
        .finish_and_claim(
            Completion::new(claim.run(), "w1", TaskStatus::Completed, answer()),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap();
    assert_eq!(finished.events.len(), 1);
    let claimed = claimed.unwrap();
    assert_eq!(claimed.task.id, next.id);
    f.store
        .finish_run(
            &claimed.run(),
            "w1",
            TaskStatus::WaitingInput,
            Some(json!({"outcome": "clarification"})),
        )
        .await
        .unwrap();
    f.store
        .answer_task(&next.id, "this one", "alice")
        .await
        .unwrap();
    let claims = f
        .store
        .claim_batch("w1", LEASE, &ClaimFilter::default(), 4)
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    f.store
        .finish_run(&claims[0].run(), "w1", TaskStatus::Completed, answer())
        .await
        .unwrap();

    // Abandoned after too many interrupted runs: by lease expiry, and by a worker's restart.
    let expired = f.task(TaskKind::Question, &["app"]).await;
    tasks.push(expired.id.clone());
    for _ in 0..MAX_INTERRUPTED_RUNS {
        claim_of(f, &expired.id).await;
        f.clock.advance(LEASE);
        f.store.requeue_expired().await.unwrap();
    }
    let restarted = f.task(TaskKind::Question, &["app"]).await;
    tasks.push(restarted.id.clone());
    for _ in 0..MAX_INTERRUPTED_RUNS {
        claim_of(f, &restarted.id).await;
        f.store.interrupt_worker_runs("w1").await.unwrap();
    }

    // Every stored event was heard once, in order, as stored.
    let stored = f
        .store
        .events_after(&EventStream::All, 0, 10_000)
        .await
        .unwrap();
    let finished_count = stored
        .iter()
        .filter(|r| matches!(r.event, Event::TaskFinished { .. }))
        .count();
    // Eight ends and one wait for an answer.
    assert_eq!(finished_count, 9 + 1, "{stored:?}");
    assert_eq!(heard.events(), stored);
    // Every run opened was heard once.
    let mut runs = Vec::new();
    for task in &tasks {
        for run in f.store.list_runs(task).await.unwrap() {
            runs.push(RunRef {
                task: task.clone(),
                number: run.number,
            });
        }
    }
    let mut heard_runs = heard.runs();
    let key = |r: &RunRef| (r.task.to_string(), r.number);
    runs.sort_by_key(key);
    heard_runs.sort_by_key(key);
    assert_eq!(runs.len(), 13);
    assert_eq!(heard_runs, runs);
    assert_eq!(
        heard.usage(),
        vec![usage(&tasks[1]), usage(&tasks[2])],
        "each ledger entry once"
    );
}

async fn an_observer_hears_nothing_of_failed_writes_or_other_handles(f: &Fixture) {
    let heard = Heard::register(&f.store);
    let unknown = task_id();
    assert!(matches!(
        f.store.append_event(&unknown, message("lost")).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(f.store.record_usage(usage(&unknown)).await.is_err());
    assert!(f
        .store
        .claim("w1", LEASE, &ClaimFilter::default())
        .await
        .unwrap()
        .is_none());

    let task = f.task(TaskKind::Question, &["app"]).await;
    // A compare-and-set that loses, a move the state machine refuses, an answer to a task that
    // asked nothing.
    assert!(matches!(
        f.store
            .transition(&task.id, TaskStatus::Running, TaskStatus::Cancelled, None)
            .await,
        Err(StoreError::StatusConflict { .. })
    ));
    assert!(matches!(
        f.store
            .transition(&task.id, TaskStatus::Queued, TaskStatus::Completed, None)
            .await,
        Err(StoreError::InvalidTransition { .. })
    ));
    assert!(matches!(
        f.store.answer_task(&task.id, "?", "alice").await,
        Err(StoreError::StatusConflict { .. })
    ));

    // Claimed by another handle (another process): its claim and events are not this store's.
    let other = f.another_handle().await;
    let claim = other
        .claim("w1", LEASE, &ClaimFilter::default())
        .await
        .unwrap()
        .unwrap();
    other
        .append_event(&task.id, message("elsewhere"))
        .await
        .unwrap();
    // Finishes by a worker that does not hold the run (with a result and without, one by one,
    // together, and with a claim) store nothing and start nothing.
    let next = f.task(TaskKind::Question, &["app"]).await;
    for result in [Some(json!({"outcome": "answer"})), None] {
        assert!(matches!(
            f.store
                .finish_run(&claim.run(), "w2", TaskStatus::Completed, result.clone())
                .await,
            Err(StoreError::LeaseLost { .. })
        ));
        let lost = Completion::new(claim.run(), "w2", TaskStatus::Completed, result);
        let outcomes = f.store.finish_runs(vec![lost.clone()]).await.unwrap();
        assert!(matches!(outcomes[..], [Err(StoreError::LeaseLost { .. })]));
        assert!(matches!(
            f.store
                .finish_and_claim(lost, LEASE, &ClaimFilter::default())
                .await,
            Err(StoreError::LeaseLost { .. })
        ));
    }
    // The run ended by its holder through the other handle: a second finish fails here.
    other
        .finish_run(
            &claim.run(),
            "w1",
            TaskStatus::Completed,
            Some(json!({"outcome": "answer"})),
        )
        .await
        .unwrap();
    assert!(f
        .store
        .finish_run(&claim.run(), "w1", TaskStatus::Failed, None)
        .await
        .is_err());
    assert!(heard.events().is_empty(), "{:?}", heard.events());
    assert!(heard.runs().is_empty());
    assert!(heard.usage().is_empty());
    assert_eq!(
        f.store.get_task(&next.id).await.unwrap().unwrap().status,
        TaskStatus::Queued
    );

    // And what this store commits, it tells.
    let record = f
        .store
        .append_event(&next.id, message("here"))
        .await
        .unwrap();
    assert_eq!(heard.events(), vec![record]);
}

async fn a_dropped_observer_hears_nothing_and_stops_nothing(f: &Fixture) {
    let heard = Heard::register(&f.store);
    let kept = Heard::register(&f.store);
    drop(heard);
    let task = f.task(TaskKind::Question, &["app"]).await;
    let record = f
        .store
        .append_event(&task.id, message("one"))
        .await
        .unwrap();
    assert_eq!(kept.events(), vec![record]);
}

conformance!(
    an_observer_hears_every_commit_exactly_once,
    an_observer_hears_nothing_of_failed_writes_or_other_handles,
    a_dropped_observer_hears_nothing_and_stops_nothing
);
