//! How a task runs: resolved configuration, secret redaction, the system prompt, the execution
//! of a question or a change over the runtime, a model client, pinned snapshots and the tools,
//! the redacted proposal diff, and the store-free steps of publishing a proposal (push, pull
//! request, through the GitHub client). Workers (`warden-service`) run it on claimed tasks.
//!
//! It knows no task store and no HTTP server: its normal dependencies exclude `warden-store`,
//! `axum`, `utoipa` and `hyper-util` (`tests/suite/architecture.rs`).

#![warn(unreachable_pub)]
pub mod authority;
pub mod callback;
pub mod change;
pub mod chat_config;
pub mod config;
pub mod diff;
pub mod egress;
pub mod env;
pub mod fetch_tree;
pub mod gates;
pub mod gates_config;
pub mod github;
pub mod github_hook_config;
pub mod kubernetes_config;
pub mod maintain;
pub mod maintain_config;
pub mod maintain_options;
pub mod mcp_client;
pub mod mcp_config;
pub mod prompt;
pub mod publish;
pub mod question;
pub mod redact;
pub mod review;
pub mod sandbox_backend;
pub mod schedule_config;
pub mod sensitive;
pub mod serve_config;
pub mod slack_config;
pub mod telegram_config;
pub mod telemetry_config;
pub mod timing;
pub mod toolchain;
