//! The official MCP Python SDK (`mcp` on PyPI) as a test client: `WARDEN_TEST_MCP_PYTHON` names
//! a Python interpreter that can `import mcp` (and `slack_sdk`, Slack's official SDK, whose
//! request signing the Slack tests use) (`.ci/mcp-python.sh` builds a venv from the pinned
//! `.ci/mcp-requirements.txt` and prints the line). Without it the tests that drive `warden mcp`
//! with the SDK skip, saying so — unless `WARDEN_TEST_REQUIRE` lists `mcp` (CI sets it), where a
//! missing interpreter fails the test instead of letting it pass without having run.

use std::io::Write;
use std::path::PathBuf;

/// The variable naming the interpreter.
pub const PYTHON_VAR: &str = "WARDEN_TEST_MCP_PYTHON";

/// The interpreter with the SDK; `None` (said on stderr) when none is configured and the SDK is
/// not required.
///
/// # Panics
/// When `WARDEN_TEST_REQUIRE` lists `mcp` and the variable is unset or names no file.
pub fn python() -> Option<PathBuf> {
    let configured = std::env::var_os(PYTHON_VAR)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    match configured {
        Some(path) if path.is_file() => Some(path),
        configured => {
            assert!(
                !crate::postgres::required("mcp"),
                "{} lists mcp but {PYTHON_VAR} {}: build the SDK's venv with \
                 `eval \"$(bash .ci/mcp-python.sh)\"`",
                crate::postgres::REQUIRE_VAR,
                match &configured {
                    Some(path) => format!("names no file ({})", path.display()),
                    None => "is not set".to_string(),
                }
            );
            // Not `eprintln!`: the test harness would capture it.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {PYTHON_VAR} not set (the MCP Python SDK's interpreter)"
            );
            None
        }
    }
}
