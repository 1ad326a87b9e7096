//! The agent's tools over a task's working root (SPEC §4): `read_file`, `list_dir` and `search`
//! for every task, `submit_answer` and `ask_user` for question tasks, and the faux runner. Each tool is a `warden_runtime::Tool`; every path a model gives goes through
//! [`Workspace::resolve`] (and so `warden_repo::CheckoutRoot::resolve`), and every output is
//! bounded and paged in the documented formats, which the faux runner parses. Filesystem work
//! runs on its own thread so the async executor never blocks on a large read or search.

#![warn(unreachable_pub)]
mod arguments;
mod blocking;
pub mod checks;
pub mod edit;
pub mod faux;
mod list_dir;
pub mod offline;
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

/// What Warden says about a program the sandbox cannot find (a command that exited 127): to
/// the agent, in the person's progress and in check records.
pub fn not_found_sentence(program: &str) -> String {
    format!(
        "`{program}`: not found in the sandbox; the operator can add a mount or a toolchain \
         preset ([sandbox] toolchains / mounts in warden.toml)"
    )
}

/// The programs bash reported as not found (`bash: line 1: cargo: command not found`) in the
/// output of a command that exited 127, in order, without repeats.
pub fn programs_not_found(exit_code: Option<i32>, output: &str) -> Vec<String> {
    if exit_code != Some(127) {
        return Vec::new();
    }
    let mut programs: Vec<String> = Vec::new();
    for line in output.lines() {
        let Some(rest) = line.trim_end().strip_suffix(": command not found") else {
            continue;
        };
        let program = rest.rsplit(": ").next().unwrap_or(rest).trim();
        if !program.is_empty() && !programs.iter().any(|p| p == program) {
            programs.push(program.to_string());
        }
    }
    programs
}

/// The not-found sentences for `output` of a command that exited `exit_code`, one per line
/// (empty when nothing was missing).
pub fn not_found_note(exit_code: Option<i32>, output: &str) -> String {
    programs_not_found(exit_code, output)
        .iter()
        .map(|program| not_found_sentence(program))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The not-found sentences already in a tool's output, for the person's progress.
pub(crate) fn not_found_lines(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("not found in the sandbox; the operator can"))
        .map(str::trim)
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
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
    fn missing_programs_are_named_from_bash_messages() {
        let stderr = "bash: line 1: cargo: command not found\nbash: faketool: command not found\n\
                      bash: line 2: cargo: command not found\n";
        assert_eq!(
            programs_not_found(Some(127), stderr),
            vec!["cargo", "faketool"]
        );
        assert!(programs_not_found(Some(1), stderr).is_empty());
        assert!(programs_not_found(Some(127), "./x: No such file or directory").is_empty());
        assert_eq!(
            not_found_note(Some(127), "bash: line 1: cargo: command not found"),
            "`cargo`: not found in the sandbox; the operator can add a mount or a toolchain \
             preset ([sandbox] toolchains / mounts in warden.toml)"
        );
    }

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
