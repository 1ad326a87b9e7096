//! Integration tests of `warden-store`: one conformance suite, run against both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
