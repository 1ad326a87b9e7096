//! `warden diff TASK`: a change task's proposal before you approve or apply it — what it is
//! (repository, base, commit, the hash an approval binds to), a stat of the files it touches,
//! the sensitive files among them, and the unified diff with secrets and sensitive values
//! redacted. Both in-process and with `--server` the view comes from the front door
//! (`TaskService::proposal_diff`, served as `GET /v1/tasks/{id}/diff`) and its one producer
//! (`warden_engine::diff::redacted_proposal_diff`), and the text is escaped for the terminal.
//!
//! On a terminal, as git does, the diff is coloured (added lines green, removed red, hunk
//! headers cyan, file headers bold; `NO_COLOR` or `--color never` turn it off) and shown through
//! a pager (`WARDEN_PAGER`, else `PAGER`, else `less -FRX`; `--no-pager` or an empty pager
//! prints directly). Escaping happens before colouring, so the repository's own bytes can never
//! reach the terminal as control sequences.

use std::io::{IsTerminal, Write};

use serde_json::Value;
use warden_protocol::Proposal;

use crate::text;

/// When to colour: `auto` (a terminal without `NO_COLOR`), `always`, `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The change task whose proposal to show
    pub task: String,
    /// Only the summary and the stat, not the diff itself
    #[arg(long)]
    pub stat: bool,
    /// Print {task_id, repo, base_commit, commit, hash, files, sensitive_files, diff, truncated}
    /// as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Colour the diff: auto (on a terminal, unless NO_COLOR is set), always or never
    #[arg(long, value_enum, default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,
    /// Print directly instead of through a pager (WARDEN_PAGER, PAGER, or less -FRX) on a
    /// terminal
    #[arg(long)]
    pub no_pager: bool,
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// A diff line (already escaped) in its colour.
fn coloured(line: &str) -> String {
    let colour = if line.starts_with("+++ ")
        || line.starts_with("--- ")
        || line.starts_with("diff --git ")
        || line.starts_with("index ")
    {
        BOLD
    } else if line.starts_with('+') {
        GREEN
    } else if line.starts_with('-') {
        RED
    } else if line.starts_with("@@") {
        CYAN
    } else {
        return line.to_string();
    };
    format!("{colour}{line}{RESET}")
}

/// Prints a diff view (the API's `DiffView` shape) with the proposal's file stat: through a
/// pager and coloured on a terminal (see the module's documentation).
pub fn print_diff(view: &Value, proposal: Option<&Proposal>, args: &DiffArgs) {
    let terminal = std::io::stdout().is_terminal();
    let colour = match args.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    let text = render_diff(view, proposal, args, colour);
    if terminal && !args.json && !args.no_pager {
        if let Some(pager) = pager() {
            if page(&pager, &text).is_ok() {
                return;
            }
        }
    }
    print!("{text}");
}

/// The pager: `WARDEN_PAGER`, else `PAGER`, else `less -FRX`; `None` when set empty or `cat`.
fn pager() -> Option<String> {
    let chosen = std::env::var("WARDEN_PAGER")
        .or_else(|_| std::env::var("PAGER"))
        .unwrap_or_else(|_| "less -FRX".into());
    let chosen = chosen.trim();
    (!chosen.is_empty() && chosen != "cat").then(|| chosen.to_string())
}

/// Shows `text` through `pager` (run by `sh -c`, as git runs its pager), waiting for it to
/// end. `Err` when it could not start: the caller prints instead.
fn page(pager: &str, text: &str) -> std::io::Result<()> {
    // The person's own pager on their own terminal, with their environment, as git runs it:
    // nothing of the repository's decides what runs (the text only goes to its input).
    #[allow(clippy::disallowed_methods)]
    let mut child = std::process::Command::new("sh")
        .args(["-c", pager])
        .env(
            "LESS",
            std::env::var("LESS").unwrap_or_else(|_| "FRX".into()),
        )
        .stdin(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // The reader may quit early (q in less): a broken pipe is not an error.
        let _ = stdin.write_all(text.as_bytes());
    }
    child.wait()?;
    Ok(())
}

/// The text `print_diff` shows, coloured when `colour`.
fn render_diff(view: &Value, proposal: Option<&Proposal>, args: &DiffArgs, colour: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    macro_rules! emit {
        ($($arg:tt)*) => {{
            let _ = writeln!(out, $($arg)*);
        }};
    }
    let files = proposal
        .map(|p| serde_json::to_value(&p.files).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    if args.json {
        let mut view = view.clone();
        view["files"] = files;
        if args.stat {
            view["diff"] = Value::Null;
        }
        emit!("{}", text::json_line(&view));
        return out;
    }
    let field = |name: &str| text::one_line(view[name].as_str().unwrap_or("?"));
    emit!(
        "proposal of {} on {} @ {}\n  commit {}\n  hash   {}",
        field("task_id"),
        field("repo"),
        text::short_commit(view["base_commit"].as_str().unwrap_or("?")),
        field("commit"),
        field("hash"),
    );
    if let Some(proposal) = proposal {
        let (mut added, mut removed) = (0u64, 0u64);
        for file in &proposal.files {
            let counts = match (file.additions, file.deletions) {
                (Some(a), Some(d)) => {
                    added += a;
                    removed += d;
                    format!("+{a} -{d}")
                }
                _ => "binary".into(),
            };
            emit!(
                "  {:<8} {} ({counts})",
                file.status,
                text::one_line(&file.path)
            );
        }
        emit!(
            "  {} changed, {}, {}",
            text::count(proposal.files.len() as u64, "file", "files"),
            text::count(added, "insertion", "insertions"),
            text::count(removed, "deletion", "deletions")
        );
    }
    if let Some(sensitive) = view["sensitive_files"].as_array().filter(|s| !s.is_empty()) {
        emit!("  sensitive files (their values are hidden; publishing needs a publish_sensitive approval):");
        for path in sensitive {
            emit!("    ! {}", text::one_line(path.as_str().unwrap_or("?")));
        }
    }
    if args.stat {
        return out;
    }
    emit!();
    for line in view["diff"].as_str().unwrap_or_default().lines() {
        let escaped = text::one_line(line);
        if colour {
            emit!("{}", coloured(&escaped));
        } else {
            emit!("{escaped}");
        }
    }
    if view["truncated"] == Value::Bool(true) {
        emit!("[… the diff is longer than 4 MiB and was cut here]");
    }
    out
}
