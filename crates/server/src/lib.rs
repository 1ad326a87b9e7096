//! The composition root: resolved configuration, secret redaction, and the execution of a task
//! over the runtime, a model client, pinned snapshots and the tools. The CLI runs tasks through
//! it in-process; `warden serve` workers run the same code on claimed tasks.

pub mod api;
pub mod authority;
pub mod callback;
pub mod cancel;
pub mod change;
pub mod config;
pub mod connections;
pub mod diff;
pub mod github;
pub mod hub;
pub mod journal;
pub mod ledger;
pub mod local;
pub mod lock;
pub mod metrics;
pub mod outage;
pub mod prompt;
pub mod publish;
pub mod question;
pub mod redact;
pub mod sensitive;
pub mod serve;
pub mod service;
pub mod storage;
pub mod task_view;
pub mod tasks;
pub mod time;
pub mod toolchain;
pub mod worker;
