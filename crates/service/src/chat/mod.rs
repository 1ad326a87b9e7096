//! What Warden's chat interfaces (Telegram, Slack) share, so each is only its transport: the
//! follower of task events that puts each task's message in its current state, the outbox
//! delivery loop (send once, record the id the chat returns, edit in place, retry with
//! backoff), the rendering of a task as text, and the text helpers (inert model text, splitting).

pub mod outbox;
pub mod render;
pub mod text;

pub use outbox::{
    backoff_ms, deliver_due, delivery_loop, follow, now_ms, pieces, DeliveryError, Front, Transport,
};
