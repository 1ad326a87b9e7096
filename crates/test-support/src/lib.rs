//! Test-only helpers shared by every crate's tests: a scripted model server that speaks the real
//! OpenAI Chat Completions and Anthropic Messages wire formats (streaming and not) and records
//! every request, and temporary git repositories built with the system git.

pub mod git_fixture;
pub mod model_server;
