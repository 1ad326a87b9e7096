//! Live progress on stderr: one short line per step the agent takes, so a person can follow what
//! it is doing while the result is reserved for stdout.

use std::io::Write;
use std::sync::Mutex;
use warden_protocol::Event;
use warden_runtime::EventSink;

/// Prints events to stderr as they happen.
pub struct StderrProgress {
    lock: Mutex<()>,
    /// The last submission rejection shown: `(attempt, errors without durations)`. A rejection
    /// with the same errors (the same failing check output on the same tree, timings aside) is
    /// named, not printed again.
    last_rejection: Mutex<Option<(u32, Vec<String>)>>,
}

impl StderrProgress {
    pub fn new() -> StderrProgress {
        StderrProgress {
            lock: Mutex::new(()),
            last_rejection: Mutex::new(None),
        }
    }

    /// The progress line of `event`, if it has one, given the rejections shown before.
    fn text_of(&self, event: &Event) -> Option<String> {
        if let Event::SubmissionRejected { attempt, errors } = event {
            let mut last = self
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
    /// reasons, check output) continue on indented lines instead of showing as `\n`.
    pub fn line(&self, text: &str) {
        let text = progress_text(text);
        let _guard = self.lock.lock();
        let mut stderr = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not fail the task.
        let _ = writeln!(stderr, "{text}");
    }
}

impl EventSink for StderrProgress {
    fn emit(&self, event: Event) {
        if let Some(text) = self.text_of(&event) {
            self.line(&text);
        }
    }
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
