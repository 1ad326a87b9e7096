//! End-to-end tests of the `warden` binary against real temporary git repositories and a scripted
//! model server speaking the real OpenAI and Anthropic wire formats.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
