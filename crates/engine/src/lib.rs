//! How a task runs: its sections of the configuration resolved, secret redaction, the system
//! prompt, the execution of a question or a change over the runtime, a model client, pinned
//! snapshots and the tools, the redacted proposal diff. Workers (`warden-service`) run it on
//! claimed tasks; publishing a proposal and the interfaces' configuration are the service's.
//!
//! It knows no task store and no HTTP server: its normal dependencies exclude `warden-store`,
//! `axum`, `utoipa` and `hyper-util` (`tests/suite/architecture.rs`).

#![warn(unreachable_pub)]
pub mod address;
pub mod authority;
pub mod change;
pub mod config;
pub mod diff;
pub mod egress;
pub mod fetch_tree;
pub mod gates;
pub mod gates_config;
pub mod kubernetes_config;
pub mod maintain;
pub mod maintain_config;
pub mod maintain_options;
pub mod mcp_client;
pub mod mcp_config;
pub mod prompt;
pub mod question;
pub mod redact;
pub mod review;
pub mod sandbox_backend;
pub mod sensitive;
pub mod timing;
pub mod toolchain;
