//! The integration test binary of warden-repo: real git in temp directories for pinning,
//! snapshots, the untouched-user-repository guarantee and hostile repositories.

// Fixture helpers outside `#[test]` functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
