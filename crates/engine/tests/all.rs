//! Integration tests of the engine crate: its place in the build graph.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
