//! The agent's tools over a task's working root (SPEC §4): `read_file`, `list_dir` and `search`
//! for every task, `submit_answer` and `ask_user` for question tasks, and the faux runner. Each tool is a `warden_runtime::Tool`; every path a model gives goes through
//! [`Workspace::resolve`] (and so `warden_repo::CheckoutRoot::resolve`), and every output is
//! bounded and paged in the documented formats, which the faux runner parses. Filesystem work
//! runs on its own thread so the async executor never blocks on a large read or search.

mod arguments;
mod blocking;
pub mod checks;
pub mod edit;
pub mod faux;
mod list_dir;
mod read_file;
mod search;
pub mod shell;
pub mod submit;
mod walk;
mod workspace;

pub use workspace::{Resolved, Workspace};

use std::sync::Arc;
use warden_runtime::Tool;

/// The read-only tools every task gets: `read_file`, `list_dir`, `search`.
pub fn question_tools(workspace: Arc<Workspace>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read_file::ReadFile::new(workspace.clone())),
        Arc::new(list_dir::ListDir::new(workspace.clone())),
        Arc::new(search::Search::new(workspace)),
    ]
}

/// The sentence every tool description ends with, explaining paths for this working root.
fn path_help(workspace: &Workspace) -> String {
    if workspace.is_multi_repo() {
        let names: Vec<&str> = workspace
            .checkouts()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        format!(
            " Paths are relative to the working root, which holds one folder per repository \
             ({}): a path starts with the repository name, e.g. `{}/src/main.rs`.",
            names.join(", "),
            names.first().copied().unwrap_or("repo")
        )
    } else {
        " Paths are relative to the repository root, e.g. `src/main.rs`.".to_string()
    }
}

/// At most `max` characters of `text`, and whether any were cut.
fn truncate_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    }
}

/// A model-given string made safe for a one-line progress display: control characters escaped.
fn describe_text(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.escape_debug().to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_by_characters() {
        assert_eq!(truncate_chars("héllo", 2), ("hé", true));
        assert_eq!(truncate_chars("hé", 2), ("hé", false));
        assert_eq!(truncate_chars("", 0), ("", false));
    }

    #[test]
    fn describe_text_stays_on_one_line() {
        assert_eq!(describe_text("src/lib.rs"), "src/lib.rs");
        assert_eq!(describe_text("a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
    }
}
