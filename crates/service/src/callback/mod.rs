//! Task callbacks (SPEC §6): when a task with a `callback.url` ends (a terminal status) or
//! waits for input, Warden POSTs `{"event_id", "task", "event"}` to that URL.
//!
//! - **Submission** ([`CallbackConfig::check_url`], with the configuration in
//!   [`crate::config::callback`]): the URL must be `https` with an allow-listed origin and not a
//!   non-public IP literal. Without a secret no callback is accepted.
//! - **Dispatch** ([`Callbacks::enqueue_new`]): follows the global event stream; a
//!   `task_finished` or `status_changed` event whose status is terminal or `waiting_input`, of a
//!   task that has a callback URL and is in that status, becomes an outbox intent of kind
//!   [`INTENT_KIND`] with a deterministic id — `callback:<task>:<terminal status>` (a task ends
//!   once) or `callback:<task>:waiting_input:<task event seq>` — so enqueueing it twice is a
//!   no-op and a restart can re-scan the stream from the start without sending anything again.
//!   The body is fixed at that moment (the task as `GET /v1/tasks/{id}` shows it then).
//! - **Delivery** ([`Callbacks::send_due`]): claims due intents, POSTs them with
//!   `Warden-Signature: sha256=<hex HMAC-SHA256(secret, timestamp "." body)>`,
//!   `Warden-Timestamp` (Unix seconds) and `Warden-Event-Id`; a 2xx completes the intent, anything
//!   else (3xx included: redirects are never followed) is retried with exponential backoff until
//!   `max_attempts`, then failed for good. Connections go only to addresses the
//!   `AddressPolicy` admits, checked on the resolved address itself (see
//!   [`warden_engine::address`]).
//! - **At most once per event id**: an intent is enqueued once per id and completed once; a
//!   receiver can still see an id twice if Warden dies between a 2xx and recording it, so
//!   receivers should dedupe on `Warden-Event-Id`.

pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use warden_protocol::{Event, TaskStatus};
use warden_store::{
    Clock, EventRecord, EventStream, Intent, NewIntent, Store, StoreError, SystemClock, Task,
};

use crate::config::callback::{CallbackConfig, CheckedResolver, Lookup, SystemLookup};

/// The outbox intent kind of a callback.
pub const INTENT_KIND: &str = "callback";

const LEASE: Duration = Duration::from_secs(60);
const RETRY_BASE_MS: i64 = 10_000;
const RETRY_CAP_MS: i64 = 15 * 60_000;
/// How long a run's last event may wait for the run's end to be committed (the worker emits
/// `task_finished` just before it records the status).
const FINISH_GRACE_MS: i64 = 60_000;
const BATCH: u32 = 256;
const POLL: Duration = Duration::from_secs(1);

/// Why a delivery did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The request may not be made at all (origin no longer allow-listed, a non-public IP
    /// literal, no secret): retrying cannot help.
    #[error("refused: {0}")]
    Refused(String),
    /// The receiver answered, but not with a 2xx (a 3xx is not followed).
    #[error("the receiver answered {0}")]
    Status(u16),
    /// No answer: resolution (including a name with no public address), connection, TLS or
    /// timeout.
    #[error("{0}")]
    Transport(String),
}

impl DeliveryError {
    pub fn is_retryable(&self) -> bool {
        match self {
            DeliveryError::Refused(_) => false,
            DeliveryError::Status(_) | DeliveryError::Transport(_) => true,
        }
    }
}

/// The HTTP side: a client that never follows redirects, ignores proxy variables and connects
/// only to addresses the policy admits.
pub struct CallbackClient {
    http: reqwest::Client,
    config: Arc<CallbackConfig>,
}

impl CallbackClient {
    pub fn new(config: Arc<CallbackConfig>) -> anyhow::Result<CallbackClient> {
        CallbackClient::with_lookup(config, Arc::new(SystemLookup))
    }

    /// With another name resolver (tests).
    pub fn with_lookup(
        config: Arc<CallbackConfig>,
        lookup: Arc<dyn Lookup>,
    ) -> anyhow::Result<CallbackClient> {
        let resolver = CheckedResolver::new(lookup, config.address_policy.clone());
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(resolver))
            .https_only(!config.allow_http)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .timeout(config.timeout)
            .user_agent(concat!("warden-callbacks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(CallbackClient { http, config })
    }

    /// POSTs `body` to `url`, signed at `timestamp` (Unix seconds). `Ok` on a 2xx.
    pub async fn deliver(
        &self,
        url: &str,
        event_id: &str,
        body: Vec<u8>,
        timestamp: i64,
    ) -> Result<u16, DeliveryError> {
        let secret = self
            .config
            .secret
            .as_ref()
            .ok_or_else(|| DeliveryError::Refused("no callback secret is configured".into()))?;
        // The same checks as at submission: the configuration may have changed since.
        let url = self.config.check_url(url).map_err(DeliveryError::Refused)?;
        let signature = sign::signature(secret.as_bytes(), timestamp, &body);
        let response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Warden-Signature", signature)
            .header("Warden-Timestamp", timestamp.to_string())
            .header("Warden-Event-Id", event_id)
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::Transport(error_chain(&e)))?;
        let status = response.status();
        if status.is_success() {
            Ok(status.as_u16())
        } else {
            Err(DeliveryError::Status(status.as_u16()))
        }
    }
}

/// An error and its sources, `: `-joined (reqwest hides the resolver's message in a source).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

/// What one [`Callbacks::enqueue_new`] pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// Intents stored by this pass.
    pub new: Vec<String>,
    /// Intents that existed already (a re-scan).
    pub existing: usize,
    /// The pass stopped at an event whose run has not recorded its end yet.
    pub waiting: bool,
}

/// What one [`Callbacks::send_due`] pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sent {
    pub delivered: Vec<String>,
    /// Failed attempts scheduled again.
    pub retrying: Vec<String>,
    /// Failed for good.
    pub failed: Vec<String>,
}

/// The dispatcher and sender of one process: follows the event stream into the outbox and
/// delivers the outbox's callback intents.
pub struct Callbacks {
    store: Arc<dyn Store>,
    client: CallbackClient,
    config: Arc<CallbackConfig>,
    clock: Arc<dyn Clock>,
    worker: String,
    /// The global event sequence handled so far. It starts at 0 in every process: the scan is
    /// idempotent (deterministic intent ids), so nothing is lost or sent twice across restarts.
    cursor: u64,
}

impl Callbacks {
    /// `worker` names this process's intent leases; `clock` must be the store's.
    pub fn new(
        store: Arc<dyn Store>,
        client: CallbackClient,
        clock: Arc<dyn Clock>,
        worker: String,
    ) -> Callbacks {
        let config = Arc::clone(&client.config);
        Callbacks {
            store,
            client,
            config,
            clock,
            worker,
            cursor: 0,
        }
    }

    /// Turns the events stored since the last pass into callback intents.
    pub async fn enqueue_new(&mut self) -> Result<Enqueued, StoreError> {
        let mut report = Enqueued::default();
        loop {
            let records = self
                .store
                .events_after(&EventStream::All, self.cursor, BATCH)
                .await?;
            if records.is_empty() {
                return Ok(report);
            }
            for record in records {
                match self.enqueue_for(&record).await? {
                    Step::Skip => {}
                    Step::Enqueued(id) => report.new.push(id),
                    Step::Existing => report.existing += 1,
                    Step::Wait => {
                        report.waiting = true;
                        return Ok(report);
                    }
                }
                self.cursor = record.seq;
            }
        }
    }

    async fn enqueue_for(&self, record: &EventRecord) -> Result<Step, StoreError> {
        let status = match &record.event {
            Event::TaskFinished { status, .. } | Event::StatusChanged { status } => *status,
            _ => return Ok(Step::Skip),
        };
        if !(status.is_terminal() || status == TaskStatus::WaitingInput) {
            return Ok(Step::Skip);
        }
        let Some(task) = self.store.get_task(&record.task).await? else {
            return Ok(Step::Skip);
        };
        let Some(url) = task.callback_url.clone() else {
            return Ok(Step::Skip);
        };
        if task.status != status {
            let committing = matches!(task.status, TaskStatus::Running | TaskStatus::Testing)
                && self.clock.now_ms() < record.at_ms.saturating_add(FINISH_GRACE_MS);
            return Ok(if committing { Step::Wait } else { Step::Skip });
        }
        let id = if status.is_terminal() {
            format!("callback:{}:{}", task.id, status_name(status))
        } else {
            if self.superseded(record).await? {
                return Ok(Step::Skip);
            }
            format!(
                "callback:{}:{}:{}",
                task.id,
                status_name(status),
                record.task_seq
            )
        };
        let body = callback_body(&id, &task, record);
        let intent = NewIntent {
            id: id.clone(),
            task: task.id.clone(),
            kind: INTENT_KIND.into(),
            payload: json!({"url": url, "body": body}),
        };
        match self.store.enqueue_intent(intent).await {
            Ok(_) => Ok(Step::Enqueued(id)),
            Err(StoreError::AlreadyExists { .. }) => Ok(Step::Existing),
            Err(error) => Err(error),
        }
    }

    /// Whether a later status event of the same task follows `record` (a re-scan meeting an
    /// old `waiting_input` while the task waits again for another reason).
    async fn superseded(&self, record: &EventRecord) -> Result<bool, StoreError> {
        let stream = EventStream::Task(record.task.clone());
        let mut after = record.task_seq;
        loop {
            let later = self.store.events_after(&stream, after, BATCH).await?;
            let Some(last) = later.last() else {
                return Ok(false);
            };
            if later.iter().any(|r| {
                matches!(
                    r.event,
                    Event::TaskFinished { .. } | Event::StatusChanged { .. }
                )
            }) {
                return Ok(true);
            }
            after = last.task_seq;
        }
    }

    /// Delivers every due callback intent once.
    pub async fn send_due(&self) -> Result<Sent, StoreError> {
        let mut report = Sent::default();
        // The outbox is shared: claim only callbacks, never another consumer's intents.
        while let Some(intent) = self
            .store
            .claim_intent(&self.worker, LEASE, &[INTENT_KIND])
            .await?
        {
            self.send_one(intent, &mut report).await?;
        }
        Ok(report)
    }

    async fn send_one(&self, intent: Intent, report: &mut Sent) -> Result<(), StoreError> {
        let url = intent.payload["url"].as_str().unwrap_or_default();
        let outcome = match serde_json::to_vec(&intent.payload["body"]) {
            Ok(body) => {
                self.client
                    .deliver(url, &intent.id, body, self.clock.now_ms().div_euclid(1000))
                    .await
            }
            Err(error) => Err(DeliveryError::Refused(format!(
                "unreadable payload: {error}"
            ))),
        };
        let result = match outcome {
            Ok(_) => {
                report.delivered.push(intent.id.clone());
                self.store
                    .complete_intent(&intent.id, &self.worker)
                    .await
                    .map(drop)
            }
            Err(error) => {
                let retry_at = (error.is_retryable() && intent.attempts < self.config.max_attempts)
                    .then(|| {
                        self.clock
                            .now_ms()
                            .saturating_add(backoff_ms(intent.attempts))
                    });
                let message = format!("attempt {}: {error}", intent.attempts);
                tracing::info!(intent = %intent.id, %message, retry = retry_at.is_some(), "callback not delivered");
                match retry_at {
                    Some(_) => report.retrying.push(intent.id.clone()),
                    None => report.failed.push(intent.id.clone()),
                }
                self.store
                    .fail_intent(&intent.id, &self.worker, &message, retry_at)
                    .await
                    .map(drop)
            }
        };
        match result {
            // Another sender took it after our lease ran out; it records the outcome.
            Err(StoreError::IntentLeaseLost { .. }) | Err(StoreError::IntentState { .. }) => {
                tracing::warn!(intent = %intent.id, "callback lease lost while delivering");
                Ok(())
            }
            other => other,
        }
    }

    /// Enqueues and delivers until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            if let Err(error) = self.enqueue_new().await {
                tracing::warn!(%error, "callback dispatch failed; retrying");
            }
            if let Err(error) = self.send_due().await {
                tracing::warn!(%error, "callback delivery failed; retrying");
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

enum Step {
    Skip,
    Enqueued(String),
    Existing,
    Wait,
}

/// Starts delivering callbacks when they are configured (`warden serve`).
pub fn spawn(
    store: Arc<dyn Store>,
    config: &CallbackConfig,
    worker: String,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if !config.enabled() {
        return Ok(None);
    }
    let client = CallbackClient::new(Arc::new(config.clone()))?;
    let callbacks = Callbacks::new(store, client, Arc::new(SystemClock), worker);
    Ok(Some(tokio::spawn(callbacks.run(stop))))
}

/// The delay before attempt `attempts + 1`: 10 s, 20 s, 40 s, … at most 15 minutes.
fn backoff_ms(attempts: u32) -> i64 {
    let doublings = attempts.saturating_sub(1).min(16);
    RETRY_BASE_MS
        .saturating_mul(1i64 << doublings)
        .min(RETRY_CAP_MS)
}

fn status_name(status: TaskStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{status:?}"))
}

/// `{"event_id", "task", "event"}`: the task as the API shows it, and the event with its
/// global sequence number and time.
fn callback_body(event_id: &str, task: &Task, record: &EventRecord) -> Value {
    let mut event = serde_json::to_value(&record.event).unwrap_or(Value::Null);
    if let Some(map) = event.as_object_mut() {
        map.insert("seq".into(), json!(record.seq));
        map.insert("at".into(), json!(warden_time::rfc3339(record.at_ms)));
    }
    json!({
        "event_id": event_id,
        "task": crate::task_view::task_json(task),
        "event": event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff_ms(1), 10_000);
        assert_eq!(backoff_ms(2), 20_000);
        assert_eq!(backoff_ms(4), 80_000);
        assert_eq!(backoff_ms(40), RETRY_CAP_MS);
    }
}
