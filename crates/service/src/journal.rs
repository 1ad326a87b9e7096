//! What a service run writes to the store while it runs, and how a later run reads it back:
//! - [`StoreJournal`]: the runtime's journal over the store's hash-chained [`RunJournal`],
//!   redacting every payload before it is hashed and stored.
//! - [`StoreEvents`]: the runtime's (synchronous) event sink, feeding a bounded channel that a
//!   task drains into the store's event log, each event redacted first (one that redaction
//!   breaks is replaced by a `redaction_failed` notice, see [`Redactor::event`]);
//!   [`EventDrain::finish`] waits until every event of the run is stored, so a run is never
//!   finished with events still in flight.
//! - [`ReplayModel`]: after a crash, a new run of the task answers its first model calls from
//!   the decisions an earlier run journaled (as long as the conversation matches what was
//!   recorded), so recorded model calls are not paid for twice; then it calls the real model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use warden_protocol::{Event, TaskId};
use warden_runtime::{
    BoxFuture, EventSink, Journal, JournalError, Model, ModelError, ModelRequest, ModelResponse,
    RecordKind,
};
use warden_store::{JournalEntry, RunJournal};

use crate::outage::StoreCalls;
use warden_engine::redact::Redactor;
use warden_engine::sensitive::JournalRedaction;

/// The runtime's journal, stored in the task store. It records with each record what showing
/// it needs from the run's earlier records (a tool observation of a call on a sensitive path),
/// so a page of the journal is redacted from its own records alone.
pub struct StoreJournal {
    pub inner: RunJournal,
    pub redactor: Redactor,
    /// What redaction for display has learnt from every record of the run so far; `None` when
    /// the run's journal was continued from records this writer did not see (then nothing is
    /// recorded and readers work it out).
    display: Option<JournalRedaction>,
    /// The `model_requested` records appended so far: where the run's inbox is (see
    /// [`crate::inbox`]).
    pub model_calls: Arc<AtomicU64>,
}

impl StoreJournal {
    pub fn new(inner: RunJournal, redactor: Redactor) -> StoreJournal {
        let display = (inner.next_seq() == 0).then(JournalRedaction::default);
        StoreJournal {
            inner,
            redactor,
            display,
            model_calls: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// The snake_case name the runtime serialises a record kind as.
fn kind_name(kind: RecordKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{kind:?}"),
    }
}

impl Journal for StoreJournal {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> BoxFuture<'_, Result<(), JournalError>> {
        let payload = self.redactor.json(payload);
        let counted = kind == RecordKind::ModelRequested;
        let kind = kind_name(kind);
        let display = self
            .display
            .as_mut()
            .and_then(|redaction| redaction.display_of(&kind, &payload));
        Box::pin(async move {
            self.inner
                .append_with_display(at_ms, &kind, payload, display)
                .await
                .map_err(|e| JournalError::Io(std::io::Error::other(e.to_string())))?;
            if counted {
                self.model_calls.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
    }
}

/// Events a run's sink can hold before `emit` has to wait for the store.
const EVENT_CAPACITY: usize = 1024;

/// The sending half: hand it to the run as its [`EventSink`] (a clone sends to the same
/// drain, which ends once every clone is dropped).
#[derive(Clone)]
pub struct StoreEvents {
    sender: tokio::sync::mpsc::Sender<Event>,
    lost: Arc<AtomicU64>,
}

/// The draining half: a task appending the run's events to the store in order.
pub struct EventDrain {
    handle: tokio::task::JoinHandle<u64>,
    lost: Arc<AtomicU64>,
}

/// A sink for `task`'s events and the task that stores them. Call from within a tokio runtime.
pub fn store_events<C: StoreCalls + 'static>(
    store: C,
    task: TaskId,
    redactor: Redactor,
) -> (StoreEvents, EventDrain) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Event>(EVENT_CAPACITY);
    let lost = Arc::new(AtomicU64::new(0));
    let handle = tokio::spawn(async move {
        let mut failed = 0u64;
        while let Some(event) = receiver.recv().await {
            let event = redactor.event(event);
            if !append_with_retries(&store, &task, event).await {
                failed += 1;
            }
        }
        failed
    });
    (
        StoreEvents {
            sender,
            lost: Arc::clone(&lost),
        },
        EventDrain { handle, lost },
    )
}

/// Appends one event; `false` when it could not be stored. A run's store
/// ([`crate::outage::RunStore`]) retries transient failures until the run's lease would
/// expire, so a failure here means the run is lost or the store refused the event.
async fn append_with_retries<C: StoreCalls>(store: &C, task: &TaskId, event: Event) -> bool {
    // A commit whose acknowledgement was lost is stored twice: a repeated progress event is
    // harmless (`task_finished` is stored by the terminal move itself).
    let appended = store
        .call("storing an event", |store| {
            store.append_event(task, event.clone())
        })
        .await;
    match appended {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, %task, "an event could not be stored");
            false
        }
    }
}

impl EventSink for StoreEvents {
    fn emit(&self, event: Event) {
        match self.sender.try_send(event) {
            Ok(()) => {}
            Err(tokio::sync::mpsc::error::TrySendError::Full(event)) => {
                // The store is behind: wait for room rather than drop the event, where the
                // runtime allows blocking this thread.
                let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                let sent = multi_thread
                    && tokio::task::block_in_place(|| self.sender.blocking_send(event).is_ok());
                if !sent {
                    self.lost.fetch_add(1, Ordering::SeqCst);
                }
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                self.lost.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

impl EventDrain {
    /// Closes `sink` and waits until every event it accepted is stored. Returns how many
    /// events were lost (could not be queued or stored), logged as a warning when not zero.
    pub async fn finish(self, sink: StoreEvents) -> u64 {
        drop(sink);
        let failed = self.handle.await.unwrap_or(0);
        let lost = failed + self.lost.load(Ordering::SeqCst);
        if lost > 0 {
            tracing::warn!(lost, "events of a run were not stored");
        }
        lost
    }
}

/// One model decision an earlier run journaled, with the length of the conversation it
/// answered.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedDecision {
    pub messages: usize,
    pub response: ModelResponse,
}

/// The model decisions of one run's journal, in order. Stops at the first record it cannot
/// read: only a clean prefix is replayed.
pub fn recorded_decisions(entries: &[JournalEntry]) -> Vec<RecordedDecision> {
    let mut decisions = Vec::new();
    let mut messages = None;
    for entry in entries {
        match entry.kind.as_str() {
            "model_requested" => {
                messages = entry
                    .payload
                    .get("messages")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok());
            }
            "model_decision" => {
                let (Some(count), Ok(response)) = (
                    messages.take(),
                    serde_json::from_value::<ModelResponse>(entry.payload.clone()),
                ) else {
                    break;
                };
                decisions.push(RecordedDecision {
                    messages: count,
                    response,
                });
            }
            _ => {}
        }
    }
    decisions
}

/// A model that first replays recorded decisions, then asks the real one.
pub struct ReplayModel {
    pub inner: Arc<dyn Model>,
    /// The run's recorded decisions not replayed yet, in journal order: shared by every model
    /// of the run ([`ReplayModel::alongside`]).
    recorded: Arc<Mutex<VecDeque<RecordedDecision>>>,
    /// Responses served from the recording so far (shared with the ledger).
    pub replayed: Arc<AtomicU64>,
}

impl ReplayModel {
    pub fn new(inner: Arc<dyn Model>, recorded: Vec<RecordedDecision>) -> ReplayModel {
        ReplayModel {
            inner,
            recorded: Arc::new(Mutex::new(recorded.into())),
            replayed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Another model of the same run (a separate `[roles] reviewer`) replaying from the same
    /// recording: the run's calls replay in journal order whichever model made them, so a
    /// resumed run pays neither model again for what was already decided.
    pub fn alongside(&self, inner: Arc<dyn Model>) -> ReplayModel {
        ReplayModel {
            inner,
            recorded: Arc::clone(&self.recorded),
            replayed: Arc::clone(&self.replayed),
        }
    }

    /// The next recorded decision if it answers a conversation of this length; anything else
    /// means the run went another way, and the rest of the recording is dropped.
    fn next_recorded(&self, request: &ModelRequest) -> Option<ModelResponse> {
        let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        match recorded.front() {
            Some(next) if next.messages == request.messages.len() => {
                let response = recorded.pop_front().map(|d| d.response);
                if response.is_some() {
                    self.replayed.fetch_add(1, Ordering::SeqCst);
                }
                response
            }
            Some(_) => {
                recorded.clear();
                None
            }
            None => None,
        }
    }
}

impl Model for ReplayModel {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        match self.next_recorded(request) {
            Some(response) => Box::pin(std::future::ready(Ok(response))),
            None => self.inner.complete(request, events),
        }
    }

    fn has_price(&self) -> bool {
        self.inner.has_price()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_runtime::{Cost, Message, NoEvents};

    fn response(text: &str) -> ModelResponse {
        ModelResponse {
            model: "m".into(),
            text: Some(text.into()),
            tool_calls: vec![],
            usage: None,
            cost: Cost::Unknown,
            stop_reason: None,
            raw: json!({}),
        }
    }

    struct Live;
    impl Model for Live {
        fn name(&self) -> String {
            "m".into()
        }
        fn complete<'a>(
            &'a self,
            _request: &'a ModelRequest,
            _events: &'a dyn EventSink,
        ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
            Box::pin(std::future::ready(Ok(response("live"))))
        }
        fn has_price(&self) -> bool {
            false
        }
    }

    fn request(messages: usize) -> ModelRequest {
        ModelRequest {
            messages: vec![Message::User { text: "q".into() }; messages],
            tools: vec![],
            max_output_tokens: 10,
            cache_key: None,
        }
    }

    #[test]
    fn decisions_are_read_in_order_with_their_conversation_length() {
        let mut entries = Vec::new();
        for (kind, payload) in [
            ("run_started", json!({})),
            ("model_requested", json!({"turn": 1, "messages": 2})),
            (
                "model_decision",
                serde_json::to_value(response("a")).unwrap(),
            ),
            ("tool_observation", json!({})),
            ("model_requested", json!({"turn": 2, "messages": 4})),
            (
                "model_decision",
                serde_json::to_value(response("b")).unwrap(),
            ),
            ("model_requested", json!({"turn": 3, "messages": 6})),
        ] {
            let entry = JournalEntry::next(entries.last(), 1, kind, payload).unwrap();
            entries.push(entry);
        }
        let decisions = recorded_decisions(&entries);
        assert_eq!(
            decisions.iter().map(|d| d.messages).collect::<Vec<_>>(),
            [2, 4]
        );
        assert_eq!(decisions[1].response.text.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn replay_serves_the_matching_prefix_then_the_live_model() {
        let recorded = vec![
            RecordedDecision {
                messages: 2,
                response: response("a"),
            },
            RecordedDecision {
                messages: 4,
                response: response("b"),
            },
        ];
        let model = ReplayModel::new(Arc::new(Live), recorded);
        let text = |r: Result<ModelResponse, ModelError>| r.unwrap().text.unwrap();
        assert_eq!(text(model.complete(&request(2), &NoEvents).await), "a");
        // The conversation went another way: the rest of the recording is dropped.
        assert_eq!(text(model.complete(&request(5), &NoEvents).await), "live");
        assert_eq!(text(model.complete(&request(4), &NoEvents).await), "live");
        assert_eq!(model.replayed.load(Ordering::SeqCst), 1);
    }
}
