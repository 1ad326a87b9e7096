//! The HTTP API: axum routes over `warden_service::tasks::TaskService` (authentication, rate
//! limits, the OpenAPI document generated from the routes, Host and Origin pinning), the
//! connection handling on hyper, and `warden serve`, which runs the API with the workers.
//!
//! An interface, not a place for rules: a handler reads the request, calls one service method
//! and renders the answer. Only `warden-cli` (its `serve` feature) depends on this crate, and
//! nothing in it refers to `serve.rs`, the composition root (`tests/suite/architecture.rs`).

#![warn(unreachable_pub)]
pub mod connections;
pub mod routes;
pub mod serve;
