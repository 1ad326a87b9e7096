//! What Warden's chat interfaces (Telegram, Slack) share, so each is only its transport: the
//! follower of task events that puts each task's message in its current state, the outbox
//! delivery loop (send once, record the id the chat returns, edit in place, retry with
//! backoff), the rendering of a task as text, the text helpers (inert model text, splitting),
//! and the reports of other interfaces' start-up failures ([`Alerts`]).

pub mod alert;
pub mod outbox;
pub mod render;
pub mod text;

pub use alert::Alerts;
pub use outbox::{
    backoff_ms, deliver_due, delivery_loop, follow, now_ms, pieces, DeliveryError, Front, Transport,
};

use warden_store::Decision;

use crate::tasks::{Principal, ServiceError, TaskService};

/// A button press: decides `approval` for the hash it is bound to (the hash the message shows)
/// in `principal`'s name (the service refuses anyone but an admin); the notice to show, with
/// the first `hash_chars` characters of the hash.
pub async fn decide_pressed(
    tasks: &TaskService,
    principal: &Principal,
    approval: &str,
    decision: Decision,
    hash_chars: usize,
) -> Result<String, ServiceError> {
    let found = tasks.approval(principal, approval).await?;
    let decided = tasks
        .decide(principal, approval, decision, &found.subject_hash)
        .await?;
    Ok(format!(
        "{} {} ({})",
        match decision {
            Decision::Approve => "Approved",
            Decision::Reject => "Rejected",
        },
        decided
            .subject_hash
            .chars()
            .take(hash_chars)
            .collect::<String>(),
        decided.task_id
    ))
}
