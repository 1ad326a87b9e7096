//! Test-only helpers shared by every crate's tests: a scripted model server that speaks the real
//! OpenAI Chat Completions and Anthropic Messages wire formats (streaming and not) and records
//! every request, temporary git repositories built with the system git, and a fake of GitHub's
//! pulls API backed by a bare repository, the test Postgres (`postgres::url`), a real headless
//! browser driven over WebDriver (`browser::Browser`), the MCP Python SDK's interpreter
//! (`mcp_python::python`), GitHub's published webhook payloads (`webhook_examples::Examples`),
//! and the checks of the code's shape the
//! architecture tests share (`architecture`).

#![warn(unreachable_pub)]
pub mod architecture;
pub mod browser;
pub mod git_fixture;
pub mod github_fake;
pub mod mcp_node;
pub mod mcp_python;
pub mod model_server;
pub mod postgres;
pub mod slack_fake;
pub mod telegram_fake;
pub mod webhook_examples;

/// Polls `probe` every 50 ms for up to `timeout` until it gives something; that, or `None`.
pub fn wait_until<T>(timeout: std::time::Duration, probe: impl Fn() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
