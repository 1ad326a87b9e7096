//! Integration tests of the API crate: the HTTP API through `Router::oneshot` on a real
//! SQLite store in a temporary directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
