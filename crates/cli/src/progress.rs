//! Live progress on stderr: one short line per step the agent takes, so a person can follow what
//! it is doing while the result is reserved for stdout.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_protocol::Event;
use warden_runtime::EventSink;

/// Prints events to stderr as they happen, and a heartbeat while one tool call (a long check)
/// runs without news.
pub struct StderrProgress {
    inner: Arc<Inner>,
}

struct Inner {
    lock: Mutex<()>,
    /// The last submission rejection shown: `(attempt, errors without durations)`. A rejection
    /// with the same errors (the same failing check output on the same tree, timings aside) is
    /// named, not printed again.
    last_rejection: Mutex<Option<(u32, Vec<String>)>>,
    /// The tool call under way, if any, or a check run outside one (a base tree's warm-up).
    running: Mutex<Option<Running>>,
    /// How long a call runs without news before a heartbeat line says it still does.
    heartbeat: Duration,
}

/// What a heartbeat is about.
struct Running {
    /// The tool call's id; empty for a check outside a tool call.
    call_id: String,
    tool: String,
    summary: String,
    started: Instant,
    /// When the last line about it was printed.
    last: Instant,
}

/// A heartbeat every this long while a tool call runs (`WARDEN_HEARTBEAT_SECS` changes it).
const HEARTBEAT: Duration = Duration::from_secs(15);

impl StderrProgress {
    pub fn new() -> StderrProgress {
        let heartbeat = std::env::var("WARDEN_HEARTBEAT_SECS")
            .ok()
            .and_then(|secs| secs.parse::<u64>().ok())
            .filter(|secs| *secs > 0)
            .map_or(HEARTBEAT, Duration::from_secs);
        let inner = Arc::new(Inner {
            lock: Mutex::new(()),
            last_rejection: Mutex::new(None),
            running: Mutex::new(None),
            heartbeat,
        });
        let watched = Arc::downgrade(&inner);
        // Ends with the progress it watches.
        let _ = std::thread::Builder::new()
            .name("warden-heartbeat".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(250));
                let Some(inner) = watched.upgrade() else {
                    return;
                };
                inner.beat();
            });
        StderrProgress { inner }
    }

    /// The progress line of `event`, if it has one, given the rejections shown before and the
    /// call under way: `run_checks` says each check's verdict when it returns, so its checks
    /// have no lines of their own.
    fn text_of(&self, event: &Event) -> Option<String> {
        if matches!(
            event,
            Event::CheckStarted { .. } | Event::CheckFinished { .. }
        ) && self.inner.running_tool().as_deref() == Some("run_checks")
        {
            return None;
        }
        if let Event::SubmissionRejected { attempt, errors } = event {
            let mut last = self
                .inner
                .last_rejection
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let compared: Vec<String> = errors.iter().map(|e| without_durations(e)).collect();
            let repeated = match last.as_ref() {
                Some((earlier, shown)) if *shown == compared => Some(*earlier),
                _ => None,
            };
            if let Some(earlier) = repeated {
                return Some(format!(
                    "    ✗ submission {attempt} rejected: the same errors as submission {earlier}"
                ));
            }
            *last = Some((*attempt, compared));
        }
        render(event)
    }

    /// Prints one step; control characters in it are escaped, and line breaks (in rejection
    /// reasons, check output) continue on indented lines instead of showing as `\n`. git's
    /// interim fetch percentages are shown on a terminal only: in a log they are noise, and the
    /// line that ends each phase (`…, done.`) says the same.
    pub fn line(&self, text: &str) {
        if interim_fetch_progress(text) && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return;
        }
        self.inner.line(text);
    }
}

impl Inner {
    fn line(&self, text: &str) {
        let _guard = self.lock.lock();
        write_line(text);
    }

    /// Says that the call under way still runs, once per heartbeat without other news. Decided
    /// and printed under the print lock: a call's verdict is never followed by its heartbeat.
    fn beat(&self) {
        let _guard = self.lock.lock();
        let now = Instant::now();
        let due = {
            let mut running = self
                .running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match running.as_mut() {
                Some(run) if now.duration_since(run.last) >= self.heartbeat => {
                    run.last = now;
                    Some((run.summary.clone(), now.duration_since(run.started)))
                }
                _ => None,
            }
        };
        if let Some((summary, elapsed)) = due {
            write_line(&format!(
                "    … {summary} still running ({} s)",
                elapsed.as_secs()
            ));
        }
    }

    /// The tool of the call under way, if one is.
    fn running_tool(&self) -> Option<String> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|run| !run.call_id.is_empty())
            .map(|run| run.tool.clone())
    }

    /// Tracks the call under way from the events that start and end one, and a check that
    /// runs outside any call (the base tree's warm-up and baseline before the agent starts).
    fn track(&self, event: &Event) {
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let in_call = running.as_ref().is_some_and(|run| !run.call_id.is_empty());
        match event {
            Event::ToolStarted {
                call_id,
                tool,
                summary,
            } => {
                *running = Some(Running {
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    summary: summary.clone(),
                    started: now,
                    last: now,
                });
            }
            Event::ToolFinished { call_id, .. }
                if running.as_ref().is_some_and(|run| &run.call_id == call_id) =>
            {
                *running = None;
            }
            Event::CheckStarted { command, .. } if !in_call => {
                *running = Some(Running {
                    call_id: String::new(),
                    tool: String::new(),
                    summary: format!("check `{}`", command.replace(['\r', '\n'], " ")),
                    started: now,
                    last: now,
                });
            }
            Event::CheckFinished { .. } if !in_call => *running = None,
            // Another line about the call under way is news: the heartbeat waits again.
            Event::CheckStarted { .. } | Event::CheckFinished { .. } => {
                if let Some(run) = running.as_mut().filter(|run| run.tool != "run_checks") {
                    run.last = now;
                }
            }
            Event::TaskFinished { .. } => *running = None,
            _ => {}
        }
    }
}

impl EventSink for StderrProgress {
    fn emit(&self, event: Event) {
        self.inner.track(&event);
        if let Some(text) = self.text_of(&event) {
            self.line(&text);
        }
    }
}

/// Whether `text` relays one of git's interim progress lines (`warden: fetching app: Receiving
/// objects:  14% (1/7)`), not the one that ends its phase.
fn interim_fetch_progress(text: &str) -> bool {
    text.starts_with("warden: fetching ") && text.contains("% (") && !text.ends_with("done.")
}

/// `text` with every duration (`0.23s`, `478 ms`, `1.5 s`) replaced by `<time>`: test runners
/// print timings, which differ between two runs of the same failing check.
fn without_durations(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !chars[i - 1].is_alphanumeric();
        if starts_word && chars[i].is_ascii_digit() {
            let mut end = i;
            while end < chars.len() && (chars[end].is_ascii_digit() || chars[end] == '.') {
                end += 1;
            }
            let mut unit = end;
            if unit < chars.len() && chars[unit] == ' ' {
                unit += 1;
            }
            let unit_len = if chars[unit..].starts_with(&['m', 's']) {
                2
            } else if chars[unit..].starts_with(&['s']) {
                1
            } else {
                0
            };
            let after = unit + unit_len;
            if unit_len > 0 && chars.get(after).is_none_or(|c| !c.is_alphanumeric()) {
                out.push_str("<time>");
                i = after;
                continue;
            }
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Writes one progress step to stderr (the caller holds the print lock).
fn write_line(text: &str) {
    let text = progress_text(text);
    let mut stderr = std::io::stderr().lock();
    // Progress is best effort: a closed stderr must not fail the task.
    let _ = writeln!(stderr, "{text}");
}

/// One progress step as printed: escaped, continuation lines indented.
fn progress_text(text: &str) -> String {
    crate::text::block(text.trim_end_matches('\n'), "      ")
}

pub(crate) use warden_service::event_line::render;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_render_line_breaks_as_lines_and_escape_the_rest() {
        let event = Event::SubmissionRejected {
            attempt: 2,
            errors: vec!["line 99 is past the end".into(), "no \x1b[31mcolour".into()],
        };
        assert_eq!(
            progress_text(&render(&event).unwrap()),
            "    ✗ submission 2 rejected:\n      - line 99 is past the end\n      - no \\u{1b}[31mcolour"
        );
        let event = Event::ToolCallRejected {
            tool: "nope".into(),
            reason: "unknown tool \"nope\"".into(),
            consecutive: 3,
        };
        assert_eq!(
            progress_text(&render(&event).unwrap()),
            "    ✗ nope call rejected (3 in a row): unknown tool \"nope\""
        );
    }

    #[test]
    fn a_rejection_repeating_the_last_one_is_named_not_printed_again() {
        let progress = StderrProgress::new();
        let rejected = |attempt, error: &str| Event::SubmissionRejected {
            attempt,
            errors: vec![error.to_string()],
        };
        let long = "check `cargo test` failed (exit code 101):\n…60 lines of output…\n\
                    Finished in 0.23s";
        assert!(progress
            .text_of(&rejected(1, long))
            .unwrap()
            .contains("60 lines"));
        // The same failure, timed differently.
        assert_eq!(
            progress
                .text_of(&rejected(2, &long.replace("0.23s", "0.31s")))
                .unwrap(),
            "    ✗ submission 2 rejected: the same errors as submission 1"
        );
        assert_eq!(
            progress.text_of(&rejected(3, long)).unwrap(),
            "    ✗ submission 3 rejected: the same errors as submission 1"
        );
        // Different errors are shown in full, and become the ones compared with.
        assert!(progress
            .text_of(&rejected(4, "other"))
            .unwrap()
            .ends_with("- other"));
        assert_eq!(
            progress.text_of(&rejected(5, "other")).unwrap(),
            "    ✗ submission 5 rejected: the same errors as submission 4"
        );
    }

    #[test]
    fn checks_have_lines_outside_run_checks_whose_note_says_their_verdicts() {
        let progress = StderrProgress::new();
        let check_started = Event::CheckStarted {
            command: "cargo test".into(),
            tree: "c".repeat(40),
        };
        let check_finished = Event::CheckFinished {
            command: "cargo test".into(),
            tree: "c".repeat(40),
            exit_code: Some(0),
            duration_ms: 400,
            reused: false,
            output_tail: String::new(),
        };
        let shown = |event: &Event| {
            progress.inner.track(event);
            progress.text_of(event)
        };
        // The base tree's warm-up, before the agent: its checks are the only news.
        assert!(shown(&check_started).is_some());
        assert_eq!(
            progress
                .inner
                .running
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .summary,
            "check `cargo test`"
        );
        assert!(shown(&check_finished).is_some());
        assert!(progress.inner.running.lock().unwrap().is_none());
        // Inside run_checks the tool's own note gives the verdicts.
        let call = |tool: &str| Event::ToolStarted {
            call_id: format!("call_{tool}"),
            tool: tool.into(),
            summary: tool.into(),
        };
        shown(&call("run_checks"));
        assert_eq!(shown(&check_started), None);
        assert_eq!(shown(&check_finished), None);
        assert_eq!(progress.inner.running_tool().as_deref(), Some("run_checks"));
        // A submission's validation has no such note: its checks are shown.
        shown(&call("submit_change"));
        assert!(shown(&check_started).is_some());
        assert_eq!(
            progress.inner.running_tool().as_deref(),
            Some("submit_change")
        );
    }

    #[test]
    fn only_git_s_interim_fetch_percentages_are_interim() {
        assert!(interim_fetch_progress(
            "warden: fetching app: Receiving objects:  14% (1/7)"
        ));
        assert!(!interim_fetch_progress(
            "warden: fetching app: Receiving objects: 100% (7/7), 3.62 KiB | 3.62 MiB/s, done."
        ));
        assert!(!interim_fetch_progress(
            "warden: pinning /work/app (14% (1/7))"
        ));
    }

    #[test]
    fn durations_are_left_out_and_other_numbers_kept() {
        assert_eq!(
            without_durations("finished in 0.00s; 478 ms, 2 s. 3 failed, exit 101, tree 0696bf1"),
            "finished in <time>; <time>, <time>. 3 failed, exit 101, tree 0696bf1"
        );
        assert_eq!(
            without_durations("v1.2 sums 10seconds"),
            "v1.2 sums 10seconds"
        );
    }
}
