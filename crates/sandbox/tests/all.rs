//! The sandbox crate's integration tests: the conformance suite every backend runs, the linux
//! backend's own tests, and the whole linux suite re-run as uid 65534 (see `suite/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
