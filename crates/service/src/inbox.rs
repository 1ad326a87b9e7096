//! Steering: the messages people send a task while it is queued or running (`POST
//! /v1/tasks/{id}/messages`, `warden say`, a reply in its chat thread) are stored in its
//! conversation with the role [`MESSAGE_STEER`], and the run's [`StoreInbox`] hands them to the
//! agent before its next model call.
//!
//! A run after a crash replays the model decisions an earlier run journaled; for those to
//! match, every message that run delivered is delivered again at the same place — before the
//! same model call of the run, counted by the `model_requested` records its journal holds —
//! and a message no earlier run delivered waits until the replayed decisions are used up.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use warden_protocol::{Failure, FailureCode, TaskId};
use warden_runtime::{BoxFuture, Inbox, Steer};
use warden_store::journal::JournalEntry;
use warden_store::MESSAGE_STEER;

use crate::outage::{RunStore, StoreCalls};

/// Where each message an earlier run delivered was delivered: message seq → the number of
/// model calls that run had journaled before it.
pub type Deliveries = HashMap<u64, u64>;

/// The deliveries a run's journal records.
pub fn recorded_deliveries(entries: &[JournalEntry]) -> Deliveries {
    let mut calls = 0;
    let mut deliveries = Deliveries::new();
    for entry in entries {
        match entry.kind.as_str() {
            "model_requested" => calls += 1,
            "message_delivered" => {
                if let Some(seq) = entry.payload.get("seq").and_then(serde_json::Value::as_u64) {
                    deliveries.entry(seq).or_insert(calls);
                }
            }
            _ => {}
        }
    }
    deliveries
}

/// A run's inbox over the task's stored conversation.
pub struct StoreInbox {
    store: RunStore,
    task: TaskId,
    /// Model calls this run has journaled so far (shared with its journal).
    calls: Arc<AtomicU64>,
    /// Where the replayed run delivered its messages.
    replayed: Deliveries,
    /// Model calls replayed from that run: a message it did not deliver waits until then.
    replaying: u64,
    delivered: Mutex<HashSet<u64>>,
}

impl StoreInbox {
    pub fn new(
        store: RunStore,
        task: TaskId,
        calls: Arc<AtomicU64>,
        replayed: Deliveries,
        replaying: u64,
    ) -> StoreInbox {
        StoreInbox {
            store,
            task,
            calls,
            replayed,
            replaying,
            delivered: Mutex::new(HashSet::new()),
        }
    }

    /// Whether message `seq` is due when `calls` model calls were journaled.
    fn due(&self, seq: u64, calls: u64) -> bool {
        match self.replayed.get(&seq) {
            Some(at) => *at <= calls,
            None => calls >= self.replaying,
        }
    }
}

impl Inbox for StoreInbox {
    fn take(&self, _turn: u32) -> BoxFuture<'_, Result<Vec<Steer>, Failure>> {
        Box::pin(async move {
            let messages = self
                .store
                .call("reading the task's messages", |store| {
                    store.task_messages(&self.task)
                })
                .await
                .map_err(|error| Failure {
                    code: FailureCode::Infrastructure,
                    message: format!("cannot read the messages sent to the task: {error}"),
                })?;
            let calls = self.calls.load(Ordering::SeqCst);
            let mut delivered = self
                .delivered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Ok(messages
                .into_iter()
                .filter(|m| m.role == MESSAGE_STEER && self.due(m.seq, calls))
                .filter(|m| delivered.insert(m.seq))
                .map(|m| Steer {
                    seq: m.seq,
                    author: m.author,
                    text: m.text,
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(kind: &str, payload: serde_json::Value) -> JournalEntry {
        JournalEntry {
            seq: 0,
            at_ms: 0,
            kind: kind.into(),
            payload,
            prev_hash: String::new(),
            hash: String::new(),
            display: None,
        }
    }

    #[test]
    fn a_delivery_is_placed_by_the_model_calls_journaled_before_it() {
        let entries = [
            entry("run_started", json!({})),
            entry("model_requested", json!({"turn": 1})),
            entry("model_decision", json!({})),
            entry("model_requested", json!({"turn": 2})),
            entry("message_delivered", json!({"seq": 4, "turn": 3})),
            entry("message_delivered", json!({"seq": 5, "turn": 3})),
            entry("model_requested", json!({"turn": 3})),
            entry("message_delivered", json!({"seq": 4, "turn": 9})),
        ];
        let deliveries = recorded_deliveries(&entries);
        assert_eq!(deliveries, Deliveries::from([(4, 2), (5, 2)]));
    }
}
