//! Making untrusted text (model output, repository file names, provider messages) safe to print
//! on a terminal: control characters — escape sequences that could rewrite the screen, hide text
//! or forge hyperlinks — are shown escaped, and multi-line text is indented so it can never start
//! a line that looks like Warden's own output (a checked citation, a status line).

/// One line of text with every control character escaped (`\n` included).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// Multi-line text: each line escaped, continuation lines prefixed with `indent`.
pub fn block(text: &str, indent: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
            out.push_str(indent);
        }
        out.push_str(&one_line(line.strip_suffix('\r').unwrap_or(line)));
    }
    out
}

/// `n` and the noun for it: `1 tool call`, `2 tool calls`.
pub fn count(n: u64, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// The closing lines of a human-readable result: task, model, spend, and notices.
pub fn result_footer(
    task_id: &warden_protocol::TaskId,
    model: &str,
    usage: &warden_protocol::Usage,
    notices: &[String],
) -> String {
    let cost = match usage.cost_usd {
        Some(cost) => format!("${cost:.4}"),
        None => "cost unknown".into(),
    };
    // A task cancelled before it recorded a result has no model to name.
    let model = if model.is_empty() {
        String::new()
    } else {
        format!(" · {}", one_line(model))
    };
    let mut out = format!(
        "\n[{task_id}{model} · {} · {} · {}{} in / {} out tokens · {cost}]\n",
        count(usage.model_calls, "model call", "model calls"),
        count(usage.tool_calls, "tool call", "tool calls"),
        usage.input_tokens,
        cache_note(
            usage.cached_input_tokens,
            usage.cache_write_tokens,
            usage.input_tokens
        ),
        usage.output_tokens
    );
    for notice in notices {
        out.push_str(&format!("note: {}\n", one_line(notice)));
    }
    out
}

/// ` (N read from the prompt cache, R%; W written)` after an input count, when a cache was used.
pub fn cache_note(read: u64, written: u64, input: u64) -> String {
    if read == 0 && written == 0 {
        return String::new();
    }
    let rate = warden_protocol::cache_hit_rate(read, input).unwrap_or(0.0) * 100.0;
    let written = if written > 0 {
        format!("; {written} written")
    } else {
        String::new()
    };
    format!(" ({read} from cache, {rate:.0}% hit{written})")
}

/// Text already laid out in lines (a rendered result) with every control character but the
/// line breaks escaped: a last pass over output whose fields may come from a server.
pub fn lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\n' {
            out.push(c);
        } else {
            push_escaped(&mut out, c);
        }
    }
    out
}

/// JSON for programs (`--json`, `logs`), one value a line: `serde_json`'s text with the
/// characters it leaves raw that still steer a terminal (see [`json_text`]) escaped.
pub fn json_line(value: &serde_json::Value) -> String {
    json_text(&value.to_string())
}

/// Pretty-printed JSON for programs, escaped like [`json_line`].
pub fn json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    Ok(json_text(&serde_json::to_string_pretty(value)?))
}

/// Serialised JSON made safe for a terminal and still equal JSON: `serde_json` escapes C0
/// controls inside strings but writes DEL, C1 controls (U+009B is a CSI) and bidi overrides
/// raw; those are written as `\uXXXX` escapes. They can only occur inside strings (JSON's
/// structure is ASCII), where the escape means the same character. Structural newlines and
/// indentation stay.
pub fn json_text(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c > '\u{1f}' && steers_terminal(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// C0, DEL and C1 controls (ESC, CSI, OSC, BEL, …), and Unicode bidi overrides and isolates.
fn steers_terminal(c: char) -> bool {
    c.is_control()
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if steers_terminal(c) => out.push_str(&c.escape_unicode().to_string()),
        c => out.push(c),
    }
}

/// The first 12 characters of a commit id for display (a hostile server's non-ASCII text
/// A cited line range as people write it: `12` for one line, `12-14` for several (after a
/// path: `src/lib.rs:12`).
pub fn line_range(start: u64, end: u64) -> String {
    if start == end {
        start.to_string()
    } else {
        format!("{start}-{end}")
    }
}

/// cannot split a character).
pub fn short_commit(commit: &str) -> &str {
    let end = commit
        .char_indices()
        .nth(12)
        .map_or(commit.len(), |(i, _)| i);
    &commit[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footer_counts_in_words_and_leaves_out_a_missing_model() {
        let task: warden_protocol::TaskId = "tsk_01JQ3ZB5X0M2K8Y4R7T9V6W1AB".parse().unwrap();
        let usage = warden_protocol::Usage {
            model_calls: 1,
            tool_calls: 2,
            cost_usd: Some(0.0),
            ..Default::default()
        };
        assert_eq!(
            result_footer(&task, "faux", &usage, &["a note".into()]),
            "\n[tsk_01JQ3ZB5X0M2K8Y4R7T9V6W1AB · faux · 1 model call · 2 tool calls · 0 in / 0 out \
             tokens · $0.0000]\nnote: a note\n"
        );
        // A task cancelled before it had a result names no model (not an empty `·  ·`).
        assert_eq!(
            result_footer(&task, "", &usage, &[]),
            "\n[tsk_01JQ3ZB5X0M2K8Y4R7T9V6W1AB · 1 model call · 2 tool calls · 0 in / 0 out \
             tokens · $0.0000]\n"
        );
    }

    #[test]
    fn short_commits_never_split_a_character() {
        assert_eq!(short_commit("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_commit("abc"), "abc");
        assert_eq!(short_commit("ééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn escapes_terminal_controls() {
        assert_eq!(one_line("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(
            one_line("evil\u{1b}]0;PWNED\u{7}.rs"),
            "evil\\u{1b}]0;PWNED\\u{7}.rs"
        );
        assert_eq!(one_line("x\ny"), "x\\ny");
        assert_eq!(one_line("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(one_line("abc\u{202e}txt"), "abc\\u{202e}txt");
        assert_eq!(one_line("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn laid_out_text_keeps_its_line_breaks_only() {
        assert_eq!(
            lines("a\u{9b}2J\nb\tc\r\n\u{202e}d \\u{9b} é\n"),
            "a\\u{9b}2J\nb\\tc\\r\n\\u{202e}d \\u{9b} é\n"
        );
    }

    #[test]
    fn json_for_a_terminal_stays_equal_json() {
        let value = serde_json::json!({
            "csi\u{9b}key": "a\u{9b}31m b\u{1b}[2J c\u{7f} d\u{202e}txt e\u{2067}f g\u{85}",
            "plain": "ünïcode \u{a0}nbsp é",
            "n": [1, null, true]
        });
        for text in [json_line(&value), json_pretty(&value).unwrap()] {
            for raw in [
                '\u{9b}', '\u{1b}', '\u{7f}', '\u{202e}', '\u{2067}', '\u{85}',
            ] {
                assert!(!text.contains(raw), "{raw:?} raw in {text}");
            }
            assert!(text.contains(r"a\u009b31m b\u001b[2J c\u007f d\u202etxt e\u2067f g\u0085"));
            assert!(text.contains("ünïcode \u{a0}nbsp é"), "{text}");
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed, value);
        }
        assert_eq!(json_line(&serde_json::json!("x")), "\"x\"");
        assert!(json_pretty(&value).unwrap().contains("\n  \""));
    }

    #[test]
    fn continuation_lines_are_indented() {
        assert_eq!(
            block("claim\n   repo:src/a.rs:1-3 @ abc", "      "),
            "claim\n         repo:src/a.rs:1-3 @ abc"
        );
    }
}
