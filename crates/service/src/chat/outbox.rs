//! The chat side of the store's outbox, the same for every chat: a [`Front`] follows the
//! store's events and puts each task's message in its current state (`put_chat_message`:
//! recorded before anything is sent; a changed text is a new revision), and
//! [`deliver_due`] sends what is due through the chat's [`Transport`]: a message never sent is
//! marked `sending` (durably) before the request leaves and the id the chat returns is recorded
//! right after; a sent one is edited in place. A message left `sending` (a crash or a lost
//! answer after the request left) is looked for in the chat first where the chat can be asked
//! ([`Transport::find_sent`]: Slack, by the message's metadata) and sent again only where it
//! cannot (Telegram). Refusals are retried with backoff (a chat's `retry after` honoured) up to
//! [`MAX_ATTEMPTS`] times.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use warden_protocol::views::TaskView as Task;

use tokio::sync::watch;
use warden_protocol::Event;
use warden_store::{ChatMessage, ChatMessageState, EventStream, NewChatMessage, Store, StoreError};

use super::text::split_message;

const DELIVERY_TICK: Duration = Duration::from_millis(250);
const DUE_BATCH: u32 = 50;
const EVENT_BATCH: u32 = 256;
const RETRY_BASE_MS: i64 = 1_000;
const RETRY_CAP_MS: i64 = 5 * 60_000;
/// Deliveries of one message tried at most this many times before it is given up on.
pub const MAX_ATTEMPTS: u32 = 12;

/// A chat's refusal, as the outbox needs to know it.
pub trait DeliveryError: std::fmt::Display {
    /// Whether trying again later can succeed.
    fn is_retryable(&self) -> bool;
    /// How long the chat asked to wait.
    fn retry_after(&self) -> Option<Duration>;
    /// An edit that changes nothing: the message already shows it.
    fn is_not_modified(&self) -> bool;
}

/// How one chat sends and edits a message.
pub trait Transport: Send + Sync {
    type Error: DeliveryError + Send;
    /// Sends `message`; the chat's id of the sent message.
    fn send(
        &self,
        message: &ChatMessage,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send;
    /// Puts the sent message `sent` (the chat's id) in `message`'s state.
    fn edit(
        &self,
        message: &ChatMessage,
        sent: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Looks in the chat for a copy of `message` whose send was started and never recorded (a
    /// crash or a lost answer in between): the chat's id of that copy, if the chat can be asked
    /// and holds one. By default a chat cannot be asked, and the message is sent again.
    fn find_sent(
        &self,
        _message: &ChatMessage,
    ) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send {
        std::future::ready(Ok(None))
    }
}

/// One chat interface as the delivery loop drives it.
pub trait Front: Send + Sync + 'static {
    /// The store's channel name (`telegram`, `slack`).
    const CHANNEL: &'static str;
    /// Where the interface keeps its own state (updates seen, the chat outbox) and follows
    /// every task's events.
    fn store(&self) -> &Arc<dyn Store>;
    /// The front door it reads tasks through.
    fn tasks(&self) -> &crate::tasks::TaskService;
    /// Puts `task`'s messages in its current state (nothing for a task of another chat).
    fn show(&self, task: &Task) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Sends or edits every due message once.
    fn deliver_due(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;
}

/// Tasks whose event announced a status the task did not have yet when it was read: a run
/// says it waits for an answer or an approval (`task_finished`) just before its status is
/// stored. Each is shown again, every round, until it has that status (or has ended), for at
/// most `PENDING_FOR` (a task that moved on past the announced status is shown by its own
/// next event).
#[derive(Debug, Default)]
pub struct Pending(
    Vec<(
        warden_protocol::TaskId,
        warden_protocol::TaskStatus,
        std::time::Instant,
    )>,
);

/// How long a task is shown again waiting for the status its event announced.
const PENDING_FOR: Duration = Duration::from_secs(30);

/// Follows the store's events: each task whose status changed is shown again. `cursor` is the
/// global event sequence followed so far: 0 at every start, as showing again puts the same
/// texts (no edit). A task read before the status its event announced is `pending`.
pub async fn follow<F: Front>(
    front: &F,
    cursor: &mut u64,
    pending: &mut Pending,
) -> Result<(), StoreError> {
    let waiting = std::mem::take(&mut pending.0);
    for (id, announced, since) in waiting {
        if since.elapsed() < PENDING_FOR {
            show_announced(front, &id, announced, since, pending).await?;
        }
    }
    loop {
        let records = front
            .store()
            .events_after(&EventStream::All, *cursor, EVENT_BATCH)
            .await?;
        if records.is_empty() {
            return Ok(());
        }
        for record in records {
            let announced = match record.event {
                Event::StatusChanged { status } | Event::TaskFinished { status, .. } => {
                    Some(status)
                }
                _ => None,
            };
            if let Some(announced) = announced {
                let now = std::time::Instant::now();
                show_announced(front, &record.task, announced, now, pending).await?;
            }
            *cursor = record.seq;
        }
    }
}

/// Shows task `id` as it is; when it does not have the `announced` status yet (and has not
/// ended), it is `pending`, shown again next round.
async fn show_announced<F: Front>(
    front: &F,
    id: &warden_protocol::TaskId,
    announced: warden_protocol::TaskStatus,
    since: std::time::Instant,
    pending: &mut Pending,
) -> Result<(), StoreError> {
    let reader = crate::tasks::Principal {
        name: F::CHANNEL.into(),
        role: crate::tasks::Role::Admin,
    };
    let task = match front.tasks().task(&reader, id.as_str()).await {
        Ok(task) => task,
        Err(crate::tasks::ServiceError::Store(error)) => return Err(error),
        // Gone (or never there): nothing to show.
        Err(_) => return Ok(()),
    };
    front.show(&task).await?;
    if task.status != announced
        && !task.status.is_terminal()
        && !pending.0.iter().any(|(waiting, ..)| waiting == id)
    {
        pending.0.push((id.clone(), announced, since));
    }
    Ok(())
}

/// Follows and delivers until `stop`.
pub async fn delivery_loop<F: Front>(front: Arc<F>, mut stop: watch::Receiver<bool>) {
    let mut cursor = 0;
    let mut pending = Pending::default();
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(error) = follow(front.as_ref(), &mut cursor, &mut pending).await {
            tracing::warn!(%error, channel = F::CHANNEL, "following tasks for a chat failed; retrying");
        }
        if let Err(error) = front.deliver_due().await {
            tracing::warn!(%error, channel = F::CHANNEL, "chat delivery failed; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(DELIVERY_TICK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Sends or edits every due message of `channel` once through `transport`; `failpoint` names
/// the crash point between the chat accepting a new message and Warden recording its id.
pub async fn deliver_due<T: Transport>(
    store: &Arc<dyn Store>,
    channel: &str,
    transport: &T,
    failpoint: &str,
) -> Result<usize, StoreError> {
    let due = store.due_chat_messages(channel, DUE_BATCH).await?;
    let count = due.len();
    for message in due {
        deliver(store, transport, failpoint, message).await?;
    }
    Ok(count)
}

async fn deliver<T: Transport>(
    store: &Arc<dyn Store>,
    transport: &T,
    failpoint: &str,
    message: ChatMessage,
) -> Result<(), StoreError> {
    let revision = message.revision;
    // A send started and never recorded: the chat may hold the message already. Where the chat
    // can be asked, the copy found is adopted (and edited to the current text) instead of
    // sending another.
    if message.state == ChatMessageState::Sending {
        match transport.find_sent(&message).await {
            Ok(Some(found)) => {
                tracing::info!(message = %message.id, "chat message whose send was not recorded found in the chat");
                // Its id recorded with no revision known to be shown: the next round edits
                // it to the current text (an edit to the same text changes nothing).
                store.chat_message_delivered(&message.id, &found, 0).await?;
                return Ok(());
            }
            Ok(None) => {
                tracing::warn!(message = %message.id, "chat message whose send was not recorded is sent again");
            }
            Err(error) => {
                tracing::warn!(message = %message.id, %error, "could not look for a chat message whose send was not recorded; it is sent again");
            }
        }
    }
    let outcome = match (message.state, message.message_id.as_deref()) {
        (ChatMessageState::Sent, Some(sent)) => match transport.edit(&message, sent).await {
            Ok(()) => Ok(sent.to_string()),
            Err(error) if error.is_not_modified() => Ok(sent.to_string()),
            Err(error) => Err(error),
        },
        _ => {
            store.start_chat_send(&message.id).await?;
            let sent = transport.send(&message).await;
            if sent.is_ok() {
                crate::publish::crash_point(failpoint);
            }
            sent
        }
    };
    match outcome {
        Ok(message_id) => {
            store
                .chat_message_delivered(&message.id, &message_id, revision)
                .await?;
        }
        Err(error) => {
            let retry_at = (error.is_retryable() && message.attempts < MAX_ATTEMPTS).then(|| {
                let backoff = error
                    .retry_after()
                    .map(|d| i64::try_from(d.as_millis()).unwrap_or(RETRY_CAP_MS))
                    .unwrap_or_else(|| backoff_ms(message.attempts));
                now_ms().saturating_add(backoff)
            });
            tracing::info!(message = %message.id, %error, retry = retry_at.is_some(), "chat message not delivered");
            store
                .chat_message_failed(&message.id, &error.to_string(), retry_at)
                .await?;
        }
    }
    Ok(())
}

/// `text` as the messages of `channel` that carry it, each at most `max_units` UTF-16 units:
/// the first under `id`, the rest `id:2`, `id:3`, … (`markup` on the last).
pub fn pieces(
    channel: &str,
    max_units: usize,
    id: &str,
    chat: &str,
    task: Option<&Task>,
    text: &str,
    markup: Option<String>,
) -> Vec<NewChatMessage> {
    let parts = split_message(text, max_units);
    let last = parts.len() - 1;
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| NewChatMessage {
            id: if index == 0 {
                id.to_string()
            } else {
                format!("{id}:{}", index + 1)
            },
            channel: channel.into(),
            chat: chat.to_string(),
            task: task.map(|t| t.id.clone()),
            text: part,
            markup: if index == last { markup.clone() } else { None },
        })
        .collect()
}

/// The delay before attempt `attempts + 1`: 1 s, 2 s, 4 s, … at most 5 minutes.
pub fn backoff_ms(attempts: u32) -> i64 {
    let doublings = attempts.saturating_sub(1).min(16);
    RETRY_BASE_MS
        .saturating_mul(1i64 << doublings)
        .min(RETRY_CAP_MS)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use warden_protocol::{TaskKind, TaskStatus};
    use warden_store::{ClaimFilter, NewTask, TaskRepo};

    /// A front that records the status of every task it is asked to show.
    struct Recording {
        store: Arc<dyn Store>,
        tasks: crate::tasks::TaskService,
        shown: Mutex<Vec<TaskStatus>>,
    }

    impl Front for Recording {
        const CHANNEL: &'static str = "test";
        fn store(&self) -> &Arc<dyn Store> {
            &self.store
        }
        fn tasks(&self) -> &crate::tasks::TaskService {
            &self.tasks
        }
        async fn show(&self, task: &Task) -> Result<(), StoreError> {
            self.shown.lock().unwrap().push(task.status);
            Ok(())
        }
        async fn deliver_due(&self) -> Result<usize, StoreError> {
            Ok(0)
        }
    }

    /// A status announced by an event before it is stored (a run's `status_changed` just before
    /// its transition): the task read in between still has the old one, and is shown again once
    /// it has the new (the GitHub comment that stayed at "running"). A run's waiting statuses
    /// no longer race so: the store stores their `task_finished` with them.
    #[tokio::test]
    async fn a_status_announced_before_it_is_stored_is_shown_once_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        let id = warden_store::new_task_id().unwrap();
        store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind: TaskKind::Change,
                    owner: "alice".into(),
                    prompt: "fix".into(),
                    repos: vec![TaskRepo {
                        name: "app".into(),
                        rev: None,
                        commit: None,
                        source: None,
                    }],
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
        let _claim = store
            .claim("w", Duration::from_secs(30), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        let front = Recording {
            store: Arc::clone(&store),
            tasks: crate::tasks::TaskService::new(Arc::clone(&store), Arc::default()),
            shown: Mutex::new(Vec::new()),
        };
        let (mut cursor, mut pending) = (0, Pending::default());
        follow(&front, &mut cursor, &mut pending).await.unwrap();
        store
            .append_event(
                &id,
                Event::StatusChanged {
                    status: TaskStatus::Testing,
                },
            )
            .await
            .unwrap();
        follow(&front, &mut cursor, &mut pending).await.unwrap();
        assert_eq!(
            front.shown.lock().unwrap().last(),
            Some(&TaskStatus::Running)
        );
        let events = |store: Arc<dyn Store>, id: warden_protocol::TaskId| async move {
            store
                .events_after(&EventStream::Task(id), 0, 1000)
                .await
                .unwrap()
                .len()
        };
        let before = events(Arc::clone(&store), id.clone()).await;
        store
            .transition(&id, TaskStatus::Running, TaskStatus::Testing, None)
            .await
            .unwrap();
        assert_eq!(events(Arc::clone(&store), id.clone()).await, before);
        // No new event of the task: it is shown again because it was pending.
        follow(&front, &mut cursor, &mut pending).await.unwrap();
        assert_eq!(
            front.shown.lock().unwrap().last(),
            Some(&TaskStatus::Testing)
        );
        assert!(pending.0.is_empty(), "{pending:?}");
        let shown = front.shown.lock().unwrap().len();
        follow(&front, &mut cursor, &mut pending).await.unwrap();
        assert_eq!(
            front.shown.lock().unwrap().len(),
            shown,
            "settled: not shown again"
        );
    }
}
