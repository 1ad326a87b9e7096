//! Integration tests of the runtime: the decision loop against a scripted in-process model, and
//! the architecture invariant that the runtime depends on no git, SQL, HTTP or provider crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
