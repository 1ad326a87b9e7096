//! A page of a task's run journals — the one reader `GET /v1/tasks/{id}/journal` and
//! `warden logs` share.
//!
//! - **Pages.** Records of every run (or of one), oldest run first and by sequence within a
//!   run, at most `limit` a page; `next_cursor` names the last record given (`(run, seq)`), and
//!   the next page starts after it. Only the page's records (and the record before the first)
//!   are read from the store.
//! - **Chain verification across pages.** Each record carries `chain_ok`: it continues the
//!   record before it in its run (read here, never taken from the cursor) and its hash matches
//!   its content, so a reader of every page has verified every link.
//! - **Redaction for display** ([`warden_engine::sensitive`]): what a record needs from the
//!   run's earlier records (whether a tool observation's call was on a sensitive path) was
//!   recorded when it was appended (`JournalEntry::display`), so page N costs what page 1 does.
//!   Only a page holding an observation written without it (before it was recorded, or by a
//!   raw append) reads the run's earlier records, a batch at a time, keeping only which calls
//!   touched sensitive paths.

use warden_engine::sensitive::{redact_recorded, JournalRedaction};
use warden_protocol::views::{JournalCursor, JournalPage, JournalRecordView, RunView, Timestamp};
use warden_store::{JournalEntry, Run, RunRef, Store, StoreError};

use super::{Principal, ServiceError, TaskService};

/// Records read at a time while learning what a run did before a page.
const LEARN_BATCH: u32 = 64;

/// Which records a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalPageQuery {
    /// Only this run (from 1).
    pub run: Option<u32>,
    /// The last record of the previous page.
    pub after: Option<JournalCursor>,
    /// Records a page holds at most (at least 1).
    pub limit: u32,
}

/// One record of a page, redacted for display.
struct JournalPageRecord {
    run: u32,
    entry: JournalEntry,
    /// It continues the record before it in its run, and its hash matches its content.
    chain_ok: bool,
}

impl TaskService {
    /// A page of task `id`'s journal, if `principal` sees the task.
    pub async fn journal_page(
        &self,
        principal: &Principal,
        id: &str,
        query: JournalPageQuery,
    ) -> Result<JournalPage, ServiceError> {
        let task = self.visible_task(principal, id).await?;
        Ok(journal_page(self.store.as_ref(), &task.id, query).await?)
    }
}

/// A page of `task`'s journal (see the module docs).
pub async fn journal_page(
    store: &dyn Store,
    task: &warden_protocol::TaskId,
    query: JournalPageQuery,
) -> Result<JournalPage, StoreError> {
    let after = query.after.map(|cursor| (cursor.run, cursor.seq));
    let runs: Vec<Run> = store
        .list_runs(task)
        .await?
        .into_iter()
        .filter(|run| query.run.is_none_or(|n| n == run.number))
        .collect();
    let limit = query.limit.max(1) as usize;
    let mut records: Vec<JournalPageRecord> = Vec::new();
    let mut next_cursor = None;
    let cursor_of = |records: &[JournalPageRecord]| records.last().map(|r| (r.run, r.entry.seq));
    for run in &runs {
        let from = match after {
            Some((after_run, _)) if run.number < after_run => continue,
            Some((after_run, after_seq)) if run.number == after_run => {
                match after_seq.checked_add(1) {
                    Some(from) => from,
                    None => continue,
                }
            }
            _ => 0,
        };
        let reference = RunRef {
            task: task.clone(),
            number: run.number,
        };
        if records.len() == limit {
            // The page is full: it is the last only if nothing follows.
            if !store.journal_page(&reference, from, 1).await?.is_empty() {
                next_cursor = cursor_of(&records);
                break;
            }
            continue;
        }
        let room = limit - records.len();
        let more = read_records(store, &reference, from, room, &mut records).await?;
        if more {
            next_cursor = cursor_of(&records);
            break;
        }
    }
    Ok(JournalPage {
        runs: runs.iter().map(run_view).collect(),
        data: records.into_iter().map(record_view).collect(),
        next_cursor: next_cursor.map(|(run, seq)| JournalCursor { run, seq }),
    })
}

fn run_view(run: &Run) -> RunView {
    RunView {
        number: run.number,
        worker: run.worker.clone(),
        started_at: Timestamp(run.started_at_ms),
        ended_at: run.ended_at_ms.map(Timestamp),
        outcome: run.outcome.clone(),
    }
}

fn record_view(record: JournalPageRecord) -> JournalRecordView {
    let entry = record.entry;
    JournalRecordView {
        run: record.run,
        seq: entry.seq,
        kind: entry.kind,
        at: Timestamp(i64::try_from(entry.at_ms).unwrap_or(i64::MAX)),
        hash: entry.hash,
        prev_hash: entry.prev_hash,
        payload: entry.payload,
        chain_ok: record.chain_ok,
    }
}

/// Appends to `records` up to `room` records of `run` from sequence `from` on, verified and
/// redacted for display; whether the run has more.
async fn read_records(
    store: &dyn Store,
    run: &RunRef,
    from: u64,
    room: usize,
    records: &mut Vec<JournalPageRecord>,
) -> Result<bool, StoreError> {
    // The record before `from` too (to check the first link), and one past the page (to know
    // whether the run goes on).
    let before_from = from.checked_sub(1);
    let wanted = u32::try_from(room + 1 + usize::from(before_from.is_some())).unwrap_or(u32::MAX);
    let mut entries = store
        .journal_page(run, before_from.unwrap_or(0), wanted)
        .await?;
    // `(seq, hash)` of the record before the next one.
    let mut before: Option<(u64, String)> = None;
    if before_from.is_some() && entries.first().map(|e| e.seq) == before_from {
        let first = entries.remove(0);
        before = Some((first.seq, first.hash));
    }
    let more = entries.len() > room;
    entries.truncate(room);

    // Only records written without what display needs send us to the run's earlier records.
    let mut learnt = None;
    if entries
        .iter()
        .any(|e| !JournalRedaction::recorded(&e.kind, e.display.as_deref()))
    {
        let mut redaction = JournalRedaction::default();
        if let Some(first) = entries.first() {
            learn_before(store, run, first.seq, &mut redaction).await?;
        }
        learnt = Some(redaction);
    }
    for mut entry in entries {
        let chain_ok = warden_store::journal::continues(
            before.as_ref().map(|(seq, hash)| (*seq, hash.as_str())),
            &entry,
        );
        before = Some((entry.seq, entry.hash.clone()));
        match &mut learnt {
            Some(redaction) => redaction.redact(&entry.kind, &mut entry.payload),
            None => redact_recorded(&entry.kind, &mut entry.payload, entry.display.as_deref()),
        }
        records.push(JournalPageRecord {
            run: run.number,
            entry,
            chain_ok,
        });
    }
    Ok(more)
}

/// Feeds `redaction` the run's records before sequence `until`, a batch at a time.
async fn learn_before(
    store: &dyn Store,
    run: &RunRef,
    until: u64,
    redaction: &mut JournalRedaction,
) -> Result<(), StoreError> {
    let mut from = 0;
    while from < until {
        let batch = store.journal_page(run, from, LEARN_BATCH).await?;
        let Some(last) = batch.last().map(|e| e.seq) else {
            break;
        };
        for entry in batch.iter().take_while(|e| e.seq < until) {
            redaction.learn(&entry.kind, &entry.payload);
        }
        from = last + 1;
    }
    Ok(())
}
