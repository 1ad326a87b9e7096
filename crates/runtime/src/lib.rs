//! The agent runtime: the decision loop and the traits it drives (model, tools, policy, journal,
//! events, clock). It knows nothing of git, SQL, HTTP or any particular provider; a test over
//! `cargo metadata` keeps it that way.

#![warn(unreachable_pub)]
pub mod journal;
pub mod limits;
pub mod model;
pub mod run;
pub mod schema;
pub mod tool;

use std::future::Future;
use std::pin::Pin;

pub use journal::{FileJournal, Journal, JournalError, JournalRecord, MemoryJournal, RecordKind};
pub use limits::{Limits, Spend};
pub use model::{
    Cost, Message, Model, ModelError, ModelRequest, ModelResponse, TokenUsage, ToolCall, ToolSpec,
};
pub use run::{
    Agent, AgentConfig, CancelFlag, Explorers, Inbox, Ledger, Role, RunInput, RunOutcome,
    RunReport, Steer, EXPLORE_TOOL,
};
pub use tool::{AllowAll, Finish, Policy, Tool, ToolOutput, Verdict};

/// A boxed, sendable future: the traits here are object-safe without an extra crate.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Receives the events of a run (progress output, SSE, the store).
pub trait EventSink: Send + Sync {
    fn emit(&self, event: warden_protocol::Event);
}

/// Discards events.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: warden_protocol::Event) {}
}

/// Time as the runtime sees it, injectable for tests. Two clocks: the wall clock says when
/// something happened (journal timestamps, for display), the monotonic one measures how long
/// something took (the run's wall-time budget). Only the second may decide anything: the wall
/// clock can be stepped (NTP, a VM resume, an operator) by hours in either direction.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Milliseconds since an arbitrary origin fixed for the clock's lifetime, never going back
    /// and never stepped with the wall clock.
    fn monotonic_ms(&self) -> u64;
}

/// The real clock: `SystemTime` for the wall clock, `Instant` (`CLOCK_MONOTONIC`) for the
/// monotonic one.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(std::time::Instant::now);
        u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
