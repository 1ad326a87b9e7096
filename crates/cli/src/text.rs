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
    let mut out = format!(
        "\n[{task_id} · {} · {} model calls · {} tool calls · {} in / {} out tokens · {cost}]\n",
        one_line(model),
        usage.model_calls,
        usage.tool_calls,
        usage.input_tokens,
        usage.output_tokens
    );
    for notice in notices {
        out.push_str(&format!("note: {}\n", one_line(notice)));
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        // C0, DEL and C1 controls (ESC, CSI, OSC, BEL, …), and Unicode bidi overrides.
        c if c.is_control()
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c) =>
        {
            out.push_str(&c.escape_unicode().to_string())
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn continuation_lines_are_indented() {
        assert_eq!(
            block("claim\n   repo:src/a.rs:1-3 @ abc", "      "),
            "claim\n         repo:src/a.rs:1-3 @ abc"
        );
    }
}
