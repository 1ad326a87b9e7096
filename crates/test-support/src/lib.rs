//! Test-only helpers shared by every crate's tests: a scripted model server that speaks the real
//! OpenAI Chat Completions and Anthropic Messages wire formats (streaming and not) and records
//! every request, temporary git repositories built with the system git, and a fake of GitHub's
//! pulls API backed by a bare repository, the test Postgres (`postgres::url`), a real headless
//! browser driven over WebDriver (`browser::Browser`), the MCP Python SDK's interpreter
//! (`mcp_python::python`), and the checks of the code's shape the
//! architecture tests share (`architecture`).

pub mod architecture;
pub mod browser;
pub mod git_fixture;
pub mod github_fake;
pub mod mcp_python;
pub mod model_server;
pub mod postgres;
pub mod slack_fake;
pub mod telegram_fake;
