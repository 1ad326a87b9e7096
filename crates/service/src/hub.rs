//! The in-process fan-out of task events to Server-Sent-Events subscribers.
//!
//! - The [`Hub`] is a [`StoreObserver`] of the store ([`instrument`]): every event this process
//!   commits (appended, or stored with a status change such as a run's end or a cancel) is
//!   published to it right after the commit, and it counts runs, ledger entries and tool calls
//!   for [`crate::metrics`]. Nothing wraps the store.
//! - The [`Hub`] keeps the most recent records in a ring ordered by global sequence, each
//!   rendered to JSON once, and a `watch` of the highest sequence it knows. Subscribers wake on
//!   the watch and copy records out of the ring, so a thousand of them cost one serialization
//!   and no store reads per event.
//! - The store stays the source of truth: a subscriber that is behind the ring, or finds a hole
//!   in it (an event committed by another process, or published a moment late), reads the
//!   store, so nothing is skipped. Holes are filled once for everyone (single flight).
//! - Events appended by other processes (`warden worker` on Postgres) arrive through one poller
//!   per process that reads the store every [`HubOptions::poll_interval`] while someone
//!   listens; it starts with the first subscriber.
//! - [`Subscription`] is pull-based: it produces the next chunk of SSE text only when the HTTP
//!   body asks for it, at most [`BATCH`] events at a time, so a slow client never makes the
//!   server buffer more.
//! - A subscription may be given an interrupt ([`Subscription::with_interrupt`]): while it
//!   waits, a change of that signal (a revocation, see [`crate::access::revocations`]) makes
//!   [`Subscription::next_chunk`] return an empty chunk at once, so its holder can check its
//!   credential without waiting for news or a keep-alive.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;
use warden_protocol::{Event, TaskId, TaskStatus};
use warden_store::{Claim, EventRecord, EventStream, Store, StoreError, StoreObserver, UsageEntry};

use crate::metrics::Metrics;

/// Events read from the store, or sent to a client, at a time.
pub const BATCH: u32 = 256;

/// How much the hub keeps and how often it looks.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// Recent events kept in memory for subscribers.
    pub ring_capacity: usize,
    /// How often the store is read for events other processes appended (and a per-task
    /// subscriber re-reads its task's status).
    pub poll_interval: Duration,
    /// An idle stream sends `: keep-alive` this often.
    pub keep_alive: Duration,
}

impl Default for HubOptions {
    fn default() -> HubOptions {
        HubOptions {
            ring_capacity: 4096,
            poll_interval: Duration::from_secs(1),
            keep_alive: Duration::from_secs(15),
        }
    }
}

/// A hub for `store`, registered as its observer: every event `store` (or a clone of it)
/// commits reaches the hub's subscribers at once, and its metrics count what this process
/// stores. The store holds the hub weakly: keep the returned hub alive.
pub fn instrument(store: &Arc<dyn Store>, options: HubOptions) -> Arc<Hub> {
    let hub = Arc::new(Hub::new(Arc::clone(store), options));
    let observer: Arc<dyn StoreObserver> = hub.clone();
    store.add_observer(Arc::downgrade(&observer));
    hub
}

/// One stored event, rendered once for every subscriber.
#[derive(Debug)]
pub struct Published {
    pub record: EventRecord,
    /// The event's type: the serde tag of [`Event`] (`task_finished`).
    pub kind: String,
    /// The `data:` line: `{"seq","task_seq","task","at","event"}`.
    pub data: String,
}

/// Just the tag of a serialized [`Event`].
#[derive(Deserialize)]
struct EventType {
    #[serde(rename = "type")]
    kind: String,
}

impl Published {
    pub fn new(record: EventRecord) -> Published {
        // The event as it serializes (its tag first), spliced in rather than re-parsed so
        // its field order is kept.
        let event = serde_json::to_string(&record.event).unwrap_or_else(|_| "null".into());
        // The tag is a snake_case identifier; anything else must not break the framing.
        let kind: String = serde_json::from_str::<EventType>(&event)
            .map(|t| t.kind)
            .unwrap_or_else(|_| "event".into())
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let task = serde_json::to_string(&record.task).unwrap_or_else(|_| "null".into());
        let data = format!(
            "{{\"seq\":{},\"task_seq\":{},\"task\":{task},\"at\":\"{}\",\"event\":{event}}}",
            record.seq,
            record.task_seq,
            warden_time::rfc3339(record.at_ms),
        );
        Published { record, kind, data }
    }

    /// Appends the SSE message with `id` (the global or the per-task sequence) to `out`.
    /// serde_json escapes newlines inside strings, so `data` is one line.
    pub fn write_frame(&self, id: u64, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "id: {id}\nevent: {}\ndata: {}\n\n",
            self.kind, self.data
        );
    }
}

/// Recent records by global sequence.
struct Ring {
    records: VecDeque<Arc<Published>>,
    /// The highest sequence known to exist (published, polled or found at start).
    latest: u64,
    capacity: usize,
}

/// What the ring holds after a sequence.
enum RingRead {
    /// Records `after + 1 ..` without a gap (at least one).
    Records(Vec<Arc<Published>>),
    /// Nothing newer is known.
    UpToDate,
    /// Newer records exist but `after + 1` is missing while later ones are here.
    Hole,
    /// `after + 1` is older than anything the ring holds.
    Behind,
}

impl Ring {
    fn insert(&mut self, published: Arc<Published>) {
        let seq = published.record.seq;
        self.latest = self.latest.max(seq);
        match self.records.back() {
            None => self.records.push_back(published),
            Some(last) if last.record.seq < seq => self.records.push_back(published),
            Some(_) => match self.records.binary_search_by_key(&seq, |p| p.record.seq) {
                Ok(_) => return,
                Err(0) if self.records.len() >= self.capacity => return,
                Err(index) => self.records.insert(index, published),
            },
        }
        while self.records.len() > self.capacity {
            self.records.pop_front();
        }
    }

    fn read_after(&self, after: u64, max: usize) -> RingRead {
        if self.latest <= after {
            return RingRead::UpToDate;
        }
        let Some(first) = self.records.front() else {
            return RingRead::Behind;
        };
        if after + 1 < first.record.seq {
            return RingRead::Behind;
        }
        let Ok(start) = self
            .records
            .binary_search_by_key(&(after + 1), |p| p.record.seq)
        else {
            return RingRead::Hole;
        };
        let out = (after + 1..)
            .zip(self.records.range(start..))
            .take_while(|(expected, published)| published.record.seq == *expected)
            .take(max)
            .map(|(_, published)| Arc::clone(published))
            .collect();
        RingRead::Records(out)
    }

    /// The highest `n` such that every sequence in `after + 1 ..= n` is in the ring.
    fn contiguous_end(&self, after: u64) -> u64 {
        let Ok(start) = self
            .records
            .binary_search_by_key(&(after + 1), |p| p.record.seq)
        else {
            return after;
        };
        let mut end = after;
        for published in self.records.range(start..) {
            if published.record.seq != end + 1 {
                break;
            }
            end += 1;
        }
        end
    }
}

/// Task owners remembered for the visibility filter of `/v1/events` (owners never change).
const OWNER_CACHE: usize = 10_000;

/// The fan-out point of one server: see the module documentation.
pub struct Hub {
    store: Arc<dyn Store>,
    options: HubOptions,
    ring: Mutex<Ring>,
    latest: watch::Sender<u64>,
    closed: watch::Sender<bool>,
    fill: tokio::sync::Mutex<()>,
    started: tokio::sync::OnceCell<()>,
    owners: Mutex<HashMap<TaskId, String>>,
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("options", &self.options)
            .field("latest", &*self.latest.borrow())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub reading `store` when it must. It hears of nothing by itself: events reach it by
    /// polling, unless it is registered as the store's observer ([`instrument`]).
    pub fn new(store: Arc<dyn Store>, options: HubOptions) -> Hub {
        Hub {
            store,
            ring: Mutex::new(Ring {
                records: VecDeque::new(),
                latest: 0,
                capacity: options.ring_capacity.max(1),
            }),
            options,
            latest: watch::channel(0).0,
            closed: watch::channel(false).0,
            fill: tokio::sync::Mutex::new(()),
            started: tokio::sync::OnceCell::new(),
            owners: Mutex::new(HashMap::new()),
            metrics: Arc::new(Metrics::new()),
        }
    }

    pub fn options(&self) -> &HubOptions {
        &self.options
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The highest global sequence the hub knows of.
    pub fn latest_seq(&self) -> u64 {
        *self.latest.borrow()
    }

    fn raise_latest(&self, seq: u64) {
        self.latest.send_if_modified(|latest| {
            if seq > *latest {
                *latest = seq;
                true
            } else {
                false
            }
        });
    }

    /// A record was stored: make it visible to the subscribers.
    pub fn publish(&self, record: EventRecord) {
        let seq = record.seq;
        self.ring().insert(Arc::new(Published::new(record)));
        self.raise_latest(seq);
    }

    /// Ends every subscription (at shutdown, so the HTTP server can drain).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Finds the end of the event log (so `/v1/events` can start there) and starts the poller.
    /// Idempotent; called for each new subscription.
    pub async fn start(self: &Arc<Self>) -> Result<(), StoreError> {
        self.started
            .get_or_try_init(|| async {
                let tail = find_tail(self.store.as_ref()).await?;
                {
                    let mut ring = self.ring();
                    ring.latest = ring.latest.max(tail);
                }
                self.raise_latest(tail);
                tokio::spawn(poll(Arc::downgrade(self), tail));
                Ok::<(), StoreError>(())
            })
            .await?;
        Ok(())
    }

    /// Records after `after` read from the store, inserted into the ring for the other
    /// subscribers; one reader at a time, so a hole costs one read however many wait on it.
    async fn fill(&self, after: u64) -> Result<Vec<Arc<Published>>, StoreError> {
        let _single_flight = self.fill.lock().await;
        if let RingRead::Records(records) = self.ring().read_after(after, BATCH as usize) {
            return Ok(records);
        }
        let records = self
            .store
            .events_after(&EventStream::All, after, BATCH)
            .await?;
        let published: Vec<Arc<Published>> = records
            .into_iter()
            .map(|r| Arc::new(Published::new(r)))
            .collect();
        let mut highest = 0;
        {
            let mut ring = self.ring();
            for record in &published {
                highest = highest.max(record.record.seq);
                ring.insert(Arc::clone(record));
            }
        }
        self.raise_latest(highest);
        Ok(published)
    }

    /// The owner of `task`, cached.
    async fn owner_of(&self, task: &TaskId) -> Result<Option<String>, StoreError> {
        let cached = self
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(task)
            .cloned();
        if let Some(owner) = cached {
            return Ok(Some(owner));
        }
        let Some(found) = self.store.get_task(task).await? else {
            return Ok(None);
        };
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= OWNER_CACHE {
            owners.clear();
        }
        owners.insert(task.clone(), found.owner.clone());
        Ok(Some(found.owner))
    }
}

/// The highest global sequence in the store, with O(log n) one-row reads (the trait has no
/// "last event" query, and reading the whole log to find its end would not scale).
async fn find_tail(store: &dyn Store) -> Result<u64, StoreError> {
    let next = |after: u64| async move {
        Ok::<_, StoreError>(
            store
                .events_after(&EventStream::All, after, 1)
                .await?
                .first()
                .map(|r| r.seq),
        )
    };
    // Invariant: an event with sequence `low` exists (or low = 0), none exists after `high`.
    let Some(mut low) = next(0).await? else {
        return Ok(0);
    };
    let mut high = low;
    loop {
        let probe = high.saturating_mul(2).max(1);
        match next(probe).await? {
            Some(seq) => {
                low = seq;
                high = seq;
            }
            None => {
                high = probe;
                break;
            }
        }
        if high == u64::MAX {
            break;
        }
    }
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        match next(mid - 1).await? {
            Some(seq) => low = seq,
            None => high = mid - 1,
        }
    }
    Ok(low)
}

/// Reads events other processes appended, every poll interval, while the hub lives.
async fn poll(hub: Weak<Hub>, mut cursor: u64) {
    let mut closed = match hub.upgrade() {
        Some(hub) => hub.closed.subscribe(),
        None => return,
    };
    let mut interval = match hub.upgrade() {
        Some(hub) => hub.options.poll_interval,
        None => return,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = closed.wait_for(|closed| *closed) => return,
        }
        let Some(hub) = hub.upgrade() else {
            return;
        };
        interval = hub.options.poll_interval;
        loop {
            cursor = hub.ring().contiguous_end(cursor);
            match hub
                .store
                .events_after(&EventStream::All, cursor, BATCH)
                .await
            {
                Ok(records) => {
                    let full = records.len() == BATCH as usize;
                    for record in records {
                        cursor = cursor.max(record.seq);
                        hub.publish(record);
                    }
                    if !full {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "reading new events failed; retrying");
                    break;
                }
            }
        }
    }
}

/// Which events a subscription carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// One task's, by its own sequence; ends once the task is terminal and everything was sent.
    Task(TaskId),
    /// Every task's (`owner: None`, for admins) or one owner's, by the global sequence.
    All { owner: Option<String> },
}

/// How soon a per-task stream re-reads its task's status after a `task_finished` event (the
/// worker stores the events before it finishes the run).
const FINISH_RECHECK: Duration = Duration::from_millis(50);

/// One client's stream: call [`Subscription::next_chunk`] until it returns `None`.
pub struct Subscription {
    hub: Arc<Hub>,
    selection: Selection,
    /// The last id sent: `task_seq` for a task, `seq` for all.
    cursor: u64,
    /// Every global sequence up to here has been looked at.
    scan: u64,
    /// Reading the task's events from the store rather than from the ring.
    catching_up: bool,
    check_status: bool,
    /// The task is terminal: end once the store has nothing more.
    ending: bool,
    next_status_check: Instant,
    next_keep_alive: Instant,
    latest: watch::Receiver<u64>,
    closed: watch::Receiver<bool>,
    /// Changes when the holder should look at its credential again.
    interrupt: Option<watch::Receiver<u64>>,
    done: bool,
}

/// Resolves when `interrupt` changes (never without one, or once its sender is gone).
async fn interrupted(interrupt: &mut Option<watch::Receiver<u64>>) {
    match interrupt {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                *interrupt = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

impl Subscription {
    /// A stream of `selection` after `after` (a task sequence for a task, a global one for
    /// all; `None` for all: from now on). Starts the hub if needed.
    pub async fn new(
        hub: Arc<Hub>,
        selection: Selection,
        after: Option<u64>,
    ) -> Result<Subscription, StoreError> {
        hub.start().await?;
        hub.metrics.stream_opened();
        let now = Instant::now();
        let (cursor, scan, catching_up) = match &selection {
            Selection::Task(_) => (after.unwrap_or(0), 0, true),
            Selection::All { .. } => {
                let start = after.unwrap_or_else(|| hub.latest_seq());
                (start, start, false)
            }
        };
        Ok(Subscription {
            latest: hub.latest.subscribe(),
            closed: hub.closed.subscribe(),
            next_keep_alive: now + hub.options.keep_alive,
            next_status_check: now + hub.options.poll_interval,
            hub,
            selection,
            cursor,
            scan,
            catching_up,
            check_status: false,
            ending: false,
            interrupt: None,
            done: false,
        })
    }

    /// While waiting, a change of `interrupt` makes [`Subscription::next_chunk`] return an
    /// empty chunk at once (nothing is skipped: the stream goes on from where it was).
    pub fn with_interrupt(mut self, interrupt: watch::Receiver<u64>) -> Subscription {
        self.interrupt = Some(interrupt);
        self
    }

    /// The next piece of the stream (one or more messages, or a keep-alive comment), waiting
    /// for it if need be; empty when the interrupt changed; `None` when the stream is over.
    pub async fn next_chunk(&mut self) -> Option<String> {
        loop {
            if self.done || *self.closed.borrow() {
                return None;
            }
            let mut out = String::new();
            match self.advance(&mut out).await {
                Ok(true) => {
                    if !out.is_empty() {
                        self.next_keep_alive = Instant::now() + self.hub.options.keep_alive;
                        return Some(out);
                    }
                }
                Ok(false) => {
                    if let Some(text) = self.wait().await {
                        return Some(text);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "an event stream could not read the store; retrying");
                    let pause = tokio::time::sleep(self.hub.options.poll_interval);
                    tokio::select! {
                        _ = pause => {}
                        _ = self.closed.wait_for(|closed| *closed) => return None,
                    }
                }
            }
        }
    }

    /// Waits for news; `Some` with a keep-alive comment when one is due.
    async fn wait(&mut self) -> Option<String> {
        let task_stream = matches!(self.selection, Selection::Task(_));
        let keep_alive = tokio::time::sleep_until(self.next_keep_alive);
        let status = tokio::time::sleep_until(self.next_status_check);
        tokio::select! {
            changed = self.latest.changed() => {
                if changed.is_err() {
                    self.done = true;
                }
                None
            }
            _ = keep_alive => {
                self.next_keep_alive = Instant::now() + self.hub.options.keep_alive;
                Some(": keep-alive\n\n".to_string())
            }
            _ = status, if task_stream => {
                self.check_status = true;
                self.next_status_check = Instant::now() + self.hub.options.poll_interval;
                None
            }
            _ = self.closed.wait_for(|closed| *closed) => None,
            () = interrupted(&mut self.interrupt) => Some(String::new()),
        }
    }

    /// Moves the stream forward, writing messages to `out`. `false` when there is nothing
    /// to do until something changes.
    async fn advance(&mut self, out: &mut String) -> Result<bool, StoreError> {
        if self.catching_up {
            self.catch_up(out).await?;
            return Ok(true);
        }
        self.latest.borrow_and_update();
        let read = self.hub.ring().read_after(self.scan, BATCH as usize);
        match read {
            RingRead::Records(records) => self.consume(&records, out).await?,
            RingRead::Hole => {
                let records = self.hub.fill(self.scan).await?;
                self.consume(&records, out).await?;
            }
            RingRead::Behind => match self.selection {
                Selection::Task(_) => self.catching_up = true,
                Selection::All { .. } => {
                    let mark = self.hub.latest_seq();
                    let records = self
                        .hub
                        .store
                        .events_after(&EventStream::All, self.scan, BATCH)
                        .await?;
                    let complete = records.len() < BATCH as usize;
                    let records: Vec<Arc<Published>> = records
                        .into_iter()
                        .map(|r| Arc::new(Published::new(r)))
                        .collect();
                    self.consume(&records, out).await?;
                    if complete {
                        // Everything up to `mark` was committed before the read.
                        self.scan = self.scan.max(mark);
                        self.cursor = self.scan;
                    }
                }
            },
            RingRead::UpToDate => {
                if self.check_status {
                    self.check_status = false;
                    return self.finish_if_terminal().await;
                }
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reads the task's events from the store; once they are all read, continues from the
    /// ring.
    async fn catch_up(&mut self, out: &mut String) -> Result<(), StoreError> {
        let Selection::Task(task) = self.selection.clone() else {
            self.catching_up = false;
            return Ok(());
        };
        let mark = self.hub.latest_seq();
        let records = self
            .hub
            .store
            .events_after(&EventStream::Task(task), self.cursor, BATCH)
            .await?;
        let complete = records.len() < BATCH as usize;
        for record in records {
            if record.task_seq <= self.cursor {
                continue;
            }
            self.cursor = record.task_seq;
            self.note_finish(&record.event);
            Published::new(record).write_frame(self.cursor, out);
        }
        if complete {
            if self.ending {
                self.done = true;
            }
            self.catching_up = false;
            // Every event up to `mark` was committed before the read, so the ring can take
            // over from there.
            self.scan = self.scan.max(mark);
            self.check_status = true;
        }
        Ok(())
    }

    /// After a `task_finished` (or a terminal status change), look at the task soon.
    fn note_finish(&mut self, event: &Event) {
        let finished = match event {
            Event::TaskFinished { .. } => true,
            Event::StatusChanged { status } => status.is_terminal(),
            // It may stand for a withheld `task_finished`.
            Event::RedactionFailed => true,
            _ => false,
        };
        if finished {
            self.check_status = true;
            self.next_status_check = Instant::now() + FINISH_RECHECK;
        }
    }

    /// For a task stream whose task is terminal (or gone): sends what is left in the store
    /// (batch by batch) and ends. The worker stores a run's events before it finishes the
    /// run, so once the status is terminal nothing more is coming.
    async fn finish_if_terminal(&mut self) -> Result<bool, StoreError> {
        let Selection::Task(task) = &self.selection else {
            return Ok(false);
        };
        let status = self.hub.store.get_task(task).await?.map(|t| t.status);
        if !status.is_none_or(TaskStatus::is_terminal) {
            return Ok(false);
        }
        self.ending = true;
        self.catching_up = true;
        Ok(true)
    }

    /// Sends the records of `records` (contiguous global sequences after `scan`) that this
    /// stream carries.
    async fn consume(
        &mut self,
        records: &[Arc<Published>],
        out: &mut String,
    ) -> Result<(), StoreError> {
        let selection = self.selection.clone();
        for published in records {
            let record = &published.record;
            if record.seq <= self.scan {
                continue;
            }
            match &selection {
                Selection::All { owner } => {
                    let visible = match owner {
                        None => true,
                        Some(owner) => {
                            self.hub.owner_of(&record.task).await?.as_deref() == Some(owner)
                        }
                    };
                    self.scan = record.seq;
                    self.cursor = record.seq;
                    if visible {
                        published.write_frame(record.seq, out);
                    }
                }
                Selection::Task(task) => {
                    if record.task != *task || record.task_seq <= self.cursor {
                        self.scan = record.seq;
                        continue;
                    }
                    if record.task_seq > self.cursor + 1 {
                        // Not expected when the global sequence had no hole; the store knows.
                        self.catching_up = true;
                        return Ok(());
                    }
                    self.scan = record.seq;
                    self.cursor = record.task_seq;
                    published.write_frame(record.task_seq, out);
                    self.note_finish(&record.event);
                }
            }
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.metrics.stream_closed();
    }
}

/// The store tells the hub what this process committed: its events reach the subscribers at
/// once (instead of at the next poll), and the metrics count runs, ledger entries and events.
impl StoreObserver for Hub {
    fn event_stored(&self, record: &EventRecord) {
        self.metrics.event_stored(&record.event);
        self.publish(record.clone());
    }

    fn run_started(&self, _claim: &Claim) {
        self.metrics.run_started();
    }

    fn usage_recorded(&self, entry: &UsageEntry) {
        self.metrics.usage_recorded(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> Arc<Published> {
        Arc::new(Published::new(EventRecord {
            seq,
            task_seq: seq,
            task: TaskId::from_ulid("01HZY8Q6K9V2M3N4P5R6S7T8V9").unwrap(),
            at_ms: 0,
            event: Event::AgentMessage {
                text: format!("{seq}"),
            },
        }))
    }

    fn seqs(read: RingRead) -> Result<Vec<u64>, &'static str> {
        match read {
            RingRead::Records(records) => Ok(records.iter().map(|r| r.record.seq).collect()),
            RingRead::UpToDate => Err("up to date"),
            RingRead::Hole => Err("hole"),
            RingRead::Behind => Err("behind"),
        }
    }

    #[test]
    fn the_ring_serves_only_gapless_runs() {
        let mut ring = Ring {
            records: VecDeque::new(),
            latest: 0,
            capacity: 4,
        };
        assert_eq!(seqs(ring.read_after(0, 10)), Err("up to date"));
        ring.latest = 3; // known to exist (found at start), never published here
        assert_eq!(seqs(ring.read_after(0, 10)), Err("behind"));
        for seq in [4, 5, 7, 5] {
            ring.insert(record(seq));
        }
        assert_eq!(seqs(ring.read_after(2, 10)), Err("behind"));
        assert_eq!(seqs(ring.read_after(3, 10)), Ok(vec![4, 5]));
        assert_eq!(seqs(ring.read_after(3, 1)), Ok(vec![4]));
        assert_eq!(seqs(ring.read_after(5, 10)), Err("hole"));
        assert_eq!(ring.contiguous_end(3), 5);
        ring.insert(record(6));
        assert_eq!(seqs(ring.read_after(5, 10)), Ok(vec![6, 7]));
        assert_eq!(seqs(ring.read_after(7, 10)), Err("up to date"));
        assert_eq!(ring.contiguous_end(3), 7);
        // Full: the oldest go; something older than everything kept is not taken.
        ring.insert(record(8));
        ring.insert(record(1));
        assert_eq!(
            ring.records
                .iter()
                .map(|r| r.record.seq)
                .collect::<Vec<_>>(),
            vec![5, 6, 7, 8]
        );
        assert_eq!(seqs(ring.read_after(3, 10)), Err("behind"));
    }

    #[test]
    fn frames_are_one_message_each() {
        let mut out = String::new();
        let published = Published::new(EventRecord {
            seq: 9,
            task_seq: 2,
            task: TaskId::from_ulid("01HZY8Q6K9V2M3N4P5R6S7T8V9").unwrap(),
            at_ms: 1_796_131_143_042,
            event: Event::AgentMessage {
                text: "a\n\ndata: forged".into(),
            },
        });
        published.write_frame(2, &mut out);
        assert_eq!(
            out,
            "id: 2\nevent: agent_message\ndata: {\"seq\":9,\"task_seq\":2,\
             \"task\":\"tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9\",\"at\":\"2026-12-01T13:19:03.042Z\",\
             \"event\":{\"type\":\"agent_message\",\"text\":\"a\\n\\ndata: forged\"}}\n\n"
        );
    }

    #[tokio::test]
    async fn the_tail_is_found_with_few_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        assert_eq!(find_tail(store.as_ref()).await.unwrap(), 0);
        let id = warden_store::new_task_id().unwrap();
        store
            .create_task(
                warden_store::NewTask {
                    id: id.clone(),
                    kind: warden_protocol::TaskKind::Question,
                    owner: "o".into(),
                    prompt: "p".into(),
                    repos: vec![],
                    priority: 0,
                    follow_up_to: None,
                    retry_of: None,
                    metadata: serde_json::json!({}),
                    callback_url: None,
                },
                None,
            )
            .await
            .unwrap();
        for count in 1..=70u64 {
            store
                .append_event(&id, Event::AgentMessage { text: "x".into() })
                .await
                .unwrap();
            if [1, 2, 3, 31, 32, 33, 64, 70].contains(&count) {
                assert_eq!(find_tail(store.as_ref()).await.unwrap(), count);
            }
        }
    }
}
