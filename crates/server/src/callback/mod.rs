//! Task callbacks (SPEC §6): when a task with a `callback.url` ends (a terminal status) or
//! waits for input, Warden POSTs `{"event_id", "task", "event"}` to that URL.
//!
//! - **Submission** ([`CallbackConfig::check_url`]): the URL must parse (WHATWG rules, so
//!   `127.1` and `0x7f000001` are read as `127.0.0.1`), be `https` (or `http` when
//!   `[callbacks] allow_http`), carry no credentials or fragment, have an origin in
//!   `[callbacks] allowed_origins`, and not be a non-public IP literal. Without a secret no
//!   callback is accepted.
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
//!   [`AddressPolicy`] admits, checked on the resolved address itself (see [`address`]).
//! - **At most once per event id**: an intent is enqueued once per id and completed once; a
//!   receiver can still see an id twice if Warden dies between a 2xx and recording it, so
//!   receivers should dedupe on `Warden-Event-Id`.

pub mod address;
pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;
use warden_protocol::{Event, TaskStatus};
use warden_store::{
    Clock, EventRecord, EventStream, Intent, NewIntent, Store, StoreError, SystemClock, Task,
};

pub use address::{AddressPolicy, CheckedResolver, Lookup, LookupFuture, SystemLookup};

/// The outbox intent kind of a callback.
pub const INTENT_KIND: &str = "callback";

/// A secret shorter than this is refused at start-up.
pub const MIN_SECRET_BYTES: usize = 32;

const DEFAULT_MAX_ATTEMPTS: u32 = 8;
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Requests must end well within the intent lease, or a second sender could claim it.
const MAX_TIMEOUT_SECS: u64 = 30;
const LEASE: Duration = Duration::from_secs(60);
const RETRY_BASE_MS: i64 = 10_000;
const RETRY_CAP_MS: i64 = 15 * 60_000;
/// How long a run's last event may wait for the run's end to be committed (the worker emits
/// `task_finished` just before it records the status).
const FINISH_GRACE_MS: i64 = 60_000;
const MAX_URL_BYTES: usize = 2048;
const BATCH: u32 = 256;
const POLL: Duration = Duration::from_secs(1);

/// `[callbacks]` in `warden.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackSection {
    /// The HMAC key, at least 32 bytes; `WARDEN_CALLBACK_SECRET` overrides.
    pub secret: Option<String>,
    /// Origins (`https://host[:port]`) callbacks may go to; nothing else is accepted.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Allow `http://` origins (for receivers on a trusted network only).
    pub allow_http: Option<bool>,
    /// Deliveries tried before an event's callback fails for good (default 8).
    pub max_attempts: Option<u32>,
    /// Seconds one delivery may take (default 10, at most 30).
    pub timeout_secs: Option<u64>,
}

/// The signing key; never printed.
#[derive(Clone)]
pub struct CallbackSecret(Arc<[u8]>);

impl std::fmt::Debug for CallbackSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallbackSecret(***)")
    }
}

impl CallbackSecret {
    pub fn new(secret: &[u8]) -> anyhow::Result<CallbackSecret> {
        if secret.len() < MIN_SECRET_BYTES {
            bail!(
                "the callback secret must be at least {MIN_SECRET_BYTES} bytes, got {}",
                secret.len()
            );
        }
        Ok(CallbackSecret(secret.into()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Callbacks, resolved. The default accepts none.
#[derive(Debug, Clone)]
pub struct CallbackConfig {
    /// `None`: callbacks are refused at submission.
    pub secret: Option<CallbackSecret>,
    pub allowed_origins: Vec<reqwest::Url>,
    pub allow_http: bool,
    pub max_attempts: u32,
    pub timeout: Duration,
    /// Where connections may go. Never from configuration: [`AddressPolicy::public_only`]
    /// unless a test says otherwise in code.
    pub address_policy: AddressPolicy,
}

impl Default for CallbackConfig {
    fn default() -> CallbackConfig {
        CallbackConfig {
            secret: None,
            allowed_origins: Vec::new(),
            allow_http: false,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            address_policy: AddressPolicy::public_only(),
        }
    }
}

impl CallbackConfig {
    /// `[callbacks]` with `WARDEN_CALLBACK_SECRET` (`env_secret`) taking precedence.
    pub fn resolve(
        section: &CallbackSection,
        env_secret: Option<String>,
    ) -> anyhow::Result<CallbackConfig> {
        let secret = match env_secret.or_else(|| section.secret.clone()) {
            Some(text) => Some(
                CallbackSecret::new(text.as_bytes())
                    .map_err(|e| anyhow::anyhow!("callbacks.secret: {e}"))?,
            ),
            None => None,
        };
        let allow_http = section.allow_http.unwrap_or(false);
        let mut allowed_origins = Vec::new();
        for text in &section.allowed_origins {
            let origin = parse_origin(text, allow_http)
                .map_err(|e| anyhow::anyhow!("callbacks.allowed_origins: {text:?}: {e}"))?;
            allowed_origins.push(origin);
        }
        let max_attempts = section.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if max_attempts == 0 {
            bail!("callbacks.max_attempts must be at least 1");
        }
        let timeout_secs = section.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if !(1..=MAX_TIMEOUT_SECS).contains(&timeout_secs) {
            bail!("callbacks.timeout_secs must be 1-{MAX_TIMEOUT_SECS}, got {timeout_secs}");
        }
        Ok(CallbackConfig {
            secret,
            allowed_origins,
            allow_http,
            max_attempts,
            timeout: Duration::from_secs(timeout_secs),
            address_policy: AddressPolicy::public_only(),
        })
    }

    /// Whether callbacks can be accepted at all.
    pub fn enabled(&self) -> bool {
        self.secret.is_some() && !self.allowed_origins.is_empty()
    }

    /// The URL a submission may use, normalised; else a message for the submitter.
    pub fn check_url(&self, text: &str) -> Result<reqwest::Url, String> {
        if self.secret.is_none() {
            return Err(
                "callbacks are disabled on this server: it has no callback secret \
                 ([callbacks] secret or WARDEN_CALLBACK_SECRET)"
                    .into(),
            );
        }
        if text.len() > MAX_URL_BYTES {
            return Err(format!("callback.url is longer than {MAX_URL_BYTES} bytes"));
        }
        let url = reqwest::Url::parse(text)
            .map_err(|e| format!("callback.url is not a valid URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err("callback.url must use https".into()),
            other => return Err(format!("callback.url scheme {other:?} is not https")),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("callback.url must not carry credentials".into());
        }
        if url.fragment().is_some() {
            return Err("callback.url must not have a fragment".into());
        }
        if let Some(address) = literal_address(&url) {
            self.address_policy
                .check(address)
                .map_err(|e| format!("callback.url: {e}"))?;
        }
        if !self
            .allowed_origins
            .iter()
            .any(|allowed| allowed.origin() == url.origin())
        {
            return Err(format!(
                "callback.url origin {} is not allow-listed on this server ([callbacks] allowed_origins)",
                url.origin().ascii_serialization()
            ));
        }
        Ok(url)
    }
}

/// An allow-list entry: `scheme://host[:port]`, nothing else.
fn parse_origin(text: &str, allow_http: bool) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| e.to_string())?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => return Err("http origins need callbacks.allow_http = true".into()),
        other => return Err(format!("scheme {other:?} is not https")),
    }
    if url.host_str().is_none()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err("expected scheme://host[:port] and nothing more".into());
    }
    Ok(url)
}

/// The socket address of a URL whose host is an IP literal (after WHATWG normalisation).
fn literal_address(url: &reqwest::Url) -> Option<std::net::SocketAddr> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: std::net::IpAddr = host.parse().ok()?;
    Some(std::net::SocketAddr::new(ip, url.port_or_known_default()?))
}

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
        map.insert("at".into(), json!(crate::time::rfc3339(record.at_ms)));
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

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn config(origins: &[&str], allow_http: bool) -> CallbackConfig {
        CallbackConfig::resolve(
            &CallbackSection {
                secret: Some(SECRET.into()),
                allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
                allow_http: Some(allow_http),
                ..CallbackSection::default()
            },
            None,
        )
        .unwrap()
    }

    #[test]
    fn configuration_is_validated() {
        let section = |secret: &str, origin: &str| CallbackSection {
            secret: Some(secret.into()),
            allowed_origins: vec![origin.into()],
            ..CallbackSection::default()
        };
        assert!(
            CallbackConfig::resolve(&section(SECRET, "https://hooks.example.com"), None)
                .unwrap()
                .enabled()
        );
        for (secret, origin) in [
            ("short", "https://hooks.example.com"),
            (SECRET, "http://hooks.example.com"),
            (SECRET, "https://hooks.example.com/path"),
            (SECRET, "https://user@hooks.example.com"),
            (SECRET, "ftp://hooks.example.com"),
            (SECRET, "not a url"),
        ] {
            assert!(
                CallbackConfig::resolve(&section(secret, origin), None).is_err(),
                "{secret} {origin}"
            );
        }
        // The environment wins over the file.
        let from_env = CallbackConfig::resolve(
            &section("short", "https://hooks.example.com"),
            Some(SECRET.into()),
        )
        .unwrap();
        assert_eq!(from_env.secret.unwrap().as_bytes(), SECRET.as_bytes());
        assert!(!CallbackConfig::default().enabled());
        assert!(format!("{:?}", config(&[], false)).contains("***"));
        assert!(!format!("{:?}", config(&[], false)).contains(SECRET));
    }

    #[test]
    fn submitted_urls_are_checked() {
        let config = config(
            &["https://hooks.example.com", "https://[2606:4700::1111]"],
            false,
        );
        let accepted = config
            .check_url("https://HOOKS.example.com:443/warden?x=1")
            .unwrap();
        assert_eq!(accepted.as_str(), "https://hooks.example.com/warden?x=1");
        assert!(config.check_url("https://[2606:4700::1111]/x").is_ok());
        for (url, expected) in [
            ("http://hooks.example.com/", "https"),
            ("https://hooks.example.com:8443/", "not allow-listed"),
            ("https://other.example.com/", "not allow-listed"),
            ("https://u:p@hooks.example.com/", "credentials"),
            ("https://hooks.example.com/#x", "fragment"),
            ("file:///etc/passwd", "scheme"),
            ("hooks.example.com", "not a valid URL"),
            ("https://127.1/", "127.0.0.1 is not a public address"),
            ("https://0x7f000001/", "127.0.0.1 is not a public address"),
            ("https://2130706433/", "127.0.0.1 is not a public address"),
            ("https://[::ffff:127.0.0.1]/", "not a public address"),
            ("https://169.254.169.254/", "not a public address"),
            ("https://100.64.0.1/", "not a public address"),
            ("https://[fd00::1]/", "not a public address"),
        ] {
            let error = config.check_url(url).unwrap_err();
            assert!(error.contains(expected), "{url}: {error}");
        }
        let error = CallbackConfig::default()
            .check_url("https://hooks.example.com/")
            .unwrap_err();
        assert!(error.contains("no callback secret"), "{error}");
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(config.check_url(&long).is_err());
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff_ms(1), 10_000);
        assert_eq!(backoff_ms(2), 20_000);
        assert_eq!(backoff_ms(4), 80_000);
        assert_eq!(backoff_ms(40), RETRY_CAP_MS);
    }
}
