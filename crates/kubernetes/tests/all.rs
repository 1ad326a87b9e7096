//! The kubernetes backend's integration tests (see `suite/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
