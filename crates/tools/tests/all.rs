//! The integration tests of warden-tools: one test binary, modules under `suite/`.

// Fixture helpers outside `#[test]` functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
