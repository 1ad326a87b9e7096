//! Tasks kept in a store and run by workers: the front door every interface calls
//! (`tasks::TaskService`), the workers that claim runs under leases and execute them with
//! `warden-engine`, the usage ledger and its budgets, journals and their replay after a crash,
//! cancellation, the event hub, metrics, callbacks, publication of approved proposals, and the
//! in-process front door (`local`) that runs `warden ask`/`run` with one worker.
//!
//! It knows no HTTP server: its normal dependencies exclude `axum` and `utoipa`, and only
//! `warden-cli` depends on `warden-api` (`tests/suite/architecture.rs`).

#![warn(unreachable_pub)]
/// A line on stderr from the long-running server (`serve`, `worker` and the interfaces they
/// start), best effort: unlike `eprintln!`, which panics, a closed stderr (a log shipper that
/// restarted, `warden serve 2>&1 | head`) never stops the server.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod access;
pub mod callback;
pub mod cancel;
pub mod chat;
pub mod compose;
pub mod config;
pub mod diff;
pub mod event_line;
pub mod gate;
pub mod github;
pub mod github_client;
pub mod hub;
pub mod inbox;
pub mod journal;
pub mod ledger;
pub mod local;
pub mod lock;
pub mod metrics;
pub mod outage;
pub mod publication;
pub mod publish;
pub mod schedule;
pub mod slack;
pub mod storage;
pub mod task_repos;
pub mod task_view;
pub mod tasks;
pub mod telegram;
pub mod warm;
pub mod worker;
