//! Integration tests of the service crate: its place in the build graph and its shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
