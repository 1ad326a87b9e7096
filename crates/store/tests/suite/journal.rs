//! Run journals in the store: records written by the runtime's journal code are accepted and
//! read back byte-compatible (`FileJournal::verify` passes on them), and anything that does not
//! continue the stored chain — a fork by a second writer, a gap, a tampered hash, an append to
//! an ended run — is refused.

use serde_json::json;
use warden_protocol::{TaskKind, TaskStatus};
use warden_runtime::{FileJournal, JournalRecord, MemoryJournal, RecordKind};
use warden_store::journal::verify_chain;
use warden_store::{JournalEntry, RunJournal, RunRef, StoreError, GENESIS_HASH};

use super::harness::Fixture;

fn entry_of(record: &JournalRecord) -> JournalEntry {
    serde_json::from_value(serde_json::to_value(record).unwrap()).unwrap()
}

async fn open_run(f: &Fixture) -> RunRef {
    f.task(TaskKind::Question, &["app"]).await;
    f.claim("w").await.unwrap().run()
}

async fn the_runtime_chain_round_trips(f: &Fixture) {
    let run = open_run(f).await;
    let mut memory = MemoryJournal::default();
    let payloads = [
        (
            RecordKind::RunStarted,
            json!({"task": run.task.as_str(), "limits": {"turns": 8}}),
        ),
        (
            RecordKind::ModelRequested,
            json!({"turn": 1, "messages": 3}),
        ),
        (
            RecordKind::ModelDecision,
            // Keys out of order, unicode, big and float numbers: hashing must survive storage.
            json!({"z": 1, "a": "héllo ✓", "n": 18446744073709551615u64, "f": 0.1, "nested": {"b": [1, 2], "a": null}}),
        ),
        (
            RecordKind::ToolObservation,
            json!({"ok": true, "text": "line\nline"}),
        ),
        (RecordKind::RunFinished, json!({"outcome": "answer"})),
    ];
    for (i, (kind, payload)) in payloads.into_iter().enumerate() {
        memory.append_now(1_000 + i as u64, kind, payload).unwrap();
    }
    for record in &memory.records {
        f.store
            .append_journal(&run, entry_of(record))
            .await
            .unwrap();
    }
    let stored = f.store.journal(&run).await.unwrap();
    assert_eq!(
        stored,
        memory.records.iter().map(entry_of).collect::<Vec<_>>()
    );
    verify_chain(&stored).unwrap();

    // Written out as JSON lines, the stored run is a journal the runtime verifies.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let mut lines = String::new();
    for entry in &stored {
        lines.push_str(&serde_json::to_string(entry).unwrap());
        lines.push('\n');
    }
    std::fs::write(&path, lines).unwrap();
    assert_eq!(FileJournal::verify(&path).unwrap(), memory.records);

    // The store's own builder produces the same chain.
    let mut built: Vec<JournalEntry> = Vec::new();
    for record in &memory.records {
        let kind = serde_json::to_value(record.kind).unwrap();
        let entry = JournalEntry::next(
            built.last(),
            record.at_ms,
            kind.as_str().unwrap(),
            record.payload.clone(),
        )
        .unwrap();
        built.push(entry);
    }
    assert_eq!(built, stored);
}

async fn forks_gaps_and_tampering_are_refused(f: &Fixture) {
    let run = open_run(f).await;
    let first = JournalEntry::next(None, 1, "run_started", json!({})).unwrap();
    assert_eq!(first.prev_hash, GENESIS_HASH);
    f.store.append_journal(&run, first.clone()).await.unwrap();

    // Two writers both continue from `first`; the second forks the chain and is refused.
    let mine = JournalEntry::next(Some(&first), 2, "model_decision", json!({"w": 1})).unwrap();
    let theirs = JournalEntry::next(Some(&first), 2, "model_decision", json!({"w": 2})).unwrap();
    f.store.append_journal(&run, mine.clone()).await.unwrap();
    let fork = f.store.append_journal(&run, theirs).await;
    assert!(
        matches!(fork, Err(StoreError::JournalConflict { seq: 1, .. })),
        "{fork:?}"
    );

    // A record that skips ahead, restarts, or lies about its hash.
    let mut gap = JournalEntry::next(Some(&mine), 3, "tool_observation", json!({})).unwrap();
    gap.seq += 1;
    assert!(matches!(
        f.store.append_journal(&run, gap).await,
        Err(StoreError::JournalConflict { .. })
    ));
    assert!(matches!(
        f.store.append_journal(&run, first.clone()).await,
        Err(StoreError::JournalConflict { .. })
    ));
    let mut tampered =
        JournalEntry::next(Some(&mine), 3, "tool_observation", json!({"a": 1})).unwrap();
    tampered.payload = json!({"a": 2});
    assert!(matches!(
        f.store.append_journal(&run, tampered).await,
        Err(StoreError::JournalConflict { .. })
    ));
    assert_eq!(
        f.store.journal(&run).await.unwrap(),
        vec![first, mine.clone()]
    );

    // Many writers race to append the next record: exactly one lands.
    let mut racers = Vec::new();
    for w in 0..8 {
        let store = f.store.clone();
        let run = run.clone();
        let entry =
            JournalEntry::next(Some(&mine), 3, "tool_observation", json!({"w": w})).unwrap();
        racers.push(tokio::spawn(async move {
            store.append_journal(&run, entry).await
        }));
    }
    let mut landed = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(()) => landed += 1,
            Err(StoreError::JournalConflict { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(landed, 1);
    let stored = f.store.journal(&run).await.unwrap();
    assert_eq!(stored.len(), 3);
    verify_chain(&stored).unwrap();

    // Once the run has ended, nothing more is appended to it.
    f.store
        .finish_run(&run, "w", TaskStatus::Completed, None)
        .await
        .unwrap();
    let late = JournalEntry::next(stored.last(), 9, "run_finished", json!({})).unwrap();
    assert!(matches!(
        f.store.append_journal(&run, late).await,
        Err(StoreError::JournalConflict { .. })
    ));
    let missing = RunRef {
        task: run.task.clone(),
        number: 7,
    };
    let entry = JournalEntry::next(None, 1, "run_started", json!({})).unwrap();
    assert!(matches!(
        f.store.append_journal(&missing, entry).await,
        Err(StoreError::NotFound { what: "run", .. })
    ));
}

async fn each_run_has_its_own_chain(f: &Fixture) {
    let first_run = open_run(f).await;
    let a = JournalEntry::next(None, 1, "run_started", json!({"run": 1})).unwrap();
    f.store.append_journal(&first_run, a.clone()).await.unwrap();
    f.store
        .finish_run(&first_run, "w", TaskStatus::Queued, None)
        .await
        .unwrap();
    let second_run = f.claim("w").await.unwrap().run();
    assert_eq!(second_run.number, 2);
    // The resumed run starts a new chain from genesis and can read the old one.
    let b = JournalEntry::next(None, 2, "run_started", json!({"run": 2})).unwrap();
    f.store
        .append_journal(&second_run, b.clone())
        .await
        .unwrap();
    assert_eq!(f.store.journal(&first_run).await.unwrap(), vec![a]);
    assert_eq!(f.store.journal(&second_run).await.unwrap(), vec![b]);
}

async fn a_writer_that_falls_behind_cannot_fork(f: &Fixture) {
    let run = open_run(f).await;
    let mut first = RunJournal::open(f.store.clone(), run.clone())
        .await
        .unwrap();
    first.append(1, "run_started", json!({})).await.unwrap();
    // A second writer picks the run up (say, a worker that wrongly thinks it owns it)...
    let mut second = RunJournal::open(f.store.clone(), run.clone())
        .await
        .unwrap();
    first
        .append(2, "model_requested", json!({"turn": 1}))
        .await
        .unwrap();
    // ...and its view is now stale: its append is refused, not forked.
    let refused = second
        .append(3, "model_requested", json!({"turn": 9}))
        .await;
    assert!(
        matches!(refused, Err(StoreError::JournalConflict { seq: 1, .. })),
        "{refused:?}"
    );
    let tail = first.append(4, "run_finished", json!({})).await.unwrap();
    assert_eq!(tail.seq, 2);
    let stored = f.store.journal(&run).await.unwrap();
    assert_eq!(stored.len(), 3);
    verify_chain(&stored).unwrap();
    // Reopening continues where the chain ends.
    let mut reopened = RunJournal::open(f.store.clone(), run).await.unwrap();
    assert_eq!(
        reopened
            .append(5, "run_finished", json!({}))
            .await
            .unwrap()
            .seq,
        3
    );
}

/// A run ended from outside (a cancel) gets the record saying how, on the chain its worker
/// wrote; the worker can append nothing after it.
async fn a_run_cancelled_from_outside_ends_its_journal(f: &Fixture) {
    let run = open_run(f).await;
    let started = JournalEntry::next(None, 1, "run_started", json!({})).unwrap();
    f.store.append_journal(&run, started.clone()).await.unwrap();
    let failure = json!({"code": "cancelled", "message": "cancelled by alice"});
    f.store
        .transition(
            &run.task,
            TaskStatus::Running,
            TaskStatus::Cancelled,
            Some(json!({"outcome": "failure", "failure": failure})),
        )
        .await
        .unwrap();
    let entries = f.store.journal(&run).await.unwrap();
    verify_chain(&entries).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].kind, "run_finished");
    assert_eq!(entries[1].payload["outcome"]["failure"], failure);
    let late = JournalEntry::next(Some(&entries[1]), 3, "model_decision", json!({})).unwrap();
    assert!(matches!(
        f.store.append_journal(&run, late).await,
        Err(StoreError::JournalConflict { .. })
    ));
    // A run that journaled nothing has no chain to end.
    f.task(TaskKind::Question, &["app"]).await;
    let silent = f.claim("w").await.unwrap().run();
    f.store
        .transition(
            &silent.task,
            TaskStatus::Running,
            TaskStatus::Cancelled,
            None,
        )
        .await
        .unwrap();
    assert!(f.store.journal(&silent).await.unwrap().is_empty());
}

async fn a_run_journal_is_read_a_page_at_a_time(f: &Fixture) {
    let run = open_run(f).await;
    let mut journal = RunJournal::open(f.store.clone(), run.clone())
        .await
        .unwrap();
    for turn in 0..5u64 {
        journal
            .append(turn, "model_requested", json!({"turn": turn}))
            .await
            .unwrap();
    }
    let all = f.store.journal(&run).await.unwrap();
    let page = |from, limit| {
        let (store, run) = (f.store.clone(), run.clone());
        async move { store.journal_page(&run, from, limit).await.unwrap() }
    };
    assert_eq!(page(0, 2).await, all[..2]);
    assert_eq!(page(2, 2).await, all[2..4]);
    assert_eq!(page(4, 2).await, all[4..]);
    assert_eq!(page(1, 100).await, all[1..]);
    assert_eq!(page(5, 2).await, vec![]);
    assert_eq!(page(u64::MAX, 2).await, vec![]);
}

/// What display needs is stored with the record (outside its hash) and read back by every
/// reader; a record appended without it reads back without it.
async fn what_display_needs_is_stored_with_a_record(f: &Fixture) {
    let run = open_run(f).await;
    let mut journal = RunJournal::open(f.store.clone(), run.clone())
        .await
        .unwrap();
    journal.append(1, "run_started", json!({})).await.unwrap();
    journal
        .append_with_display(
            2,
            "tool_observation",
            json!({"call_id": "c1", "output": "x"}),
            Some("values".into()),
        )
        .await
        .unwrap();
    let stored = f.store.journal(&run).await.unwrap();
    verify_chain(&stored).unwrap();
    let displays: Vec<_> = stored.iter().map(|e| e.display.clone()).collect();
    assert_eq!(displays, [None, Some("values".to_string())]);
    let page = f.store.journal_page(&run, 1, 10).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].display.as_deref(), Some("values"));
    // Reopened, the chain continues over records carrying it.
    let mut reopened = RunJournal::open(f.store.clone(), run.clone())
        .await
        .unwrap();
    assert_eq!(reopened.next_seq(), 2);
    reopened.append(3, "run_finished", json!({})).await.unwrap();
}

conformance!(
    what_display_needs_is_stored_with_a_record,
    a_run_journal_is_read_a_page_at_a_time,
    a_run_cancelled_from_outside_ends_its_journal,
    a_writer_that_falls_behind_cannot_fork,
    the_runtime_chain_round_trips,
    forks_gaps_and_tampering_are_refused,
    each_run_has_its_own_chain,
);
