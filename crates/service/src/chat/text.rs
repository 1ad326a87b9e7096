//! Text every chat shows: text from a repository, a model or a user made inert (no mentions,
//! no links a chat would detect), and long text split into messages of a chat's size (counted
//! in UTF-16 code units, as Telegram counts; Slack's limits are in characters, never more).

/// U+2060 WORD JOINER: invisible, and breaks a chat's detection of mentions and links.
pub const JOINER: char = '\u{2060}';

/// Text from a repository, a model or a user, made inert for a plain-text message: an
/// invisible word joiner after `@` (no mention), inside `://` and `www.` and before a `.`
/// between word characters (no link Telegram would detect: `evil.com`, `https://x`). Warden
/// sends no `parse_mode`, so nothing else in the text is markup. Only links Warden built
/// itself (citation URLs, a pull request it opened) are left as they are, by the caller.
pub fn inert(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if c == '.' && word(prev) && word(next) {
            out.push(JOINER);
        }
        out.push(c);
        match c {
            '@' => out.push(JOINER),
            ':' if next == Some('/') => out.push(JOINER),
            _ => {}
        }
    }
    out
}

/// `text` in pieces of at most `max_units` UTF-16 code units, cut after the last newline that
/// fits (else the last space, else anywhere between two characters: a character is never cut,
/// surrogate pairs included). Empty text is one piece `"…"` (Telegram refuses empty text).
pub fn split_message(text: &str, max_units: usize) -> Vec<String> {
    let max_units = max_units.max(2);
    if text.is_empty() {
        return vec!["…".to_string()];
    }
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut units = 0;
        let mut end = rest.len();
        let mut last_newline = None;
        let mut last_space = None;
        for (at, c) in rest.char_indices() {
            if units + c.len_utf16() > max_units {
                end = at;
                break;
            }
            units += c.len_utf16();
            if c == '\n' {
                last_newline = Some(at + 1);
            } else if c == ' ' {
                last_space = Some(at + 1);
            }
        }
        if end < rest.len() {
            end = last_newline
                .or(last_space)
                .filter(|&e| e > 0)
                .unwrap_or(end);
        }
        let (piece, remainder) = rest.split_at(end);
        pieces.push(piece.to_string());
        rest = remainder;
    }
    pieces
}

/// UTF-16 code units of `text`, as Telegram counts a message's length.
#[cfg(test)]
fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_MESSAGE_UNITS: usize = 4096;

    #[test]
    fn split_counts_utf16_units_and_never_cuts_a_character() {
        // Short text: one piece, unchanged.
        assert_eq!(split_message("hi", MAX_MESSAGE_UNITS), ["hi"]);
        assert_eq!(split_message("", MAX_MESSAGE_UNITS), ["…"]);
        // Exactly at the limit: one piece; one more unit: two.
        let full = "a".repeat(MAX_MESSAGE_UNITS);
        assert_eq!(split_message(&full, MAX_MESSAGE_UNITS).len(), 1);
        let over = "a".repeat(MAX_MESSAGE_UNITS + 1);
        let pieces = split_message(&over, MAX_MESSAGE_UNITS);
        assert_eq!(
            pieces.iter().map(|p| utf16_len(p)).collect::<Vec<_>>(),
            [MAX_MESSAGE_UNITS, 1]
        );
        // An emoji is two UTF-16 units (four UTF-8 bytes): 2,048 of them fill a message, and
        // one more spills over whole.
        let emoji = "😀".repeat(MAX_MESSAGE_UNITS / 2 + 1);
        let pieces = split_message(&emoji, MAX_MESSAGE_UNITS);
        assert_eq!(pieces.len(), 2);
        assert_eq!(utf16_len(&pieces[0]), MAX_MESSAGE_UNITS);
        assert_eq!(pieces[1], "😀");
        // An odd limit cannot hold half a pair: the piece stops before it.
        let pieces = split_message("a😀😀", 4);
        assert_eq!(pieces, ["a😀", "😀"]);
        // Cut after the last newline that fits, else the last space.
        assert_eq!(split_message("one\ntwo three", 9), ["one\n", "two three"]);
        assert_eq!(split_message("one two three", 9), ["one two ", "three"]);
        // Nothing is lost.
        let text = "line\n".repeat(2000) + &"ü".repeat(5000);
        let pieces = split_message(&text, MAX_MESSAGE_UNITS);
        assert!(pieces.iter().all(|p| utf16_len(p) <= MAX_MESSAGE_UNITS));
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn model_text_has_no_mentions_or_links() {
        let shown = inert("ping @admin, see https://evil.example/x or www.evil.com and evil.com");
        for link in ["@admin", "https://", "evil.example", "www.evil", "evil.com"] {
            assert!(!shown.contains(link), "{link} in {shown:?}");
        }
        // It reads the same once the invisible joiners are gone.
        assert_eq!(
            shown.replace(JOINER, ""),
            "ping @admin, see https://evil.example/x or www.evil.com and evil.com"
        );
        // Sentences and numbers keep their look; plain text has no other markup.
        assert_eq!(
            inert("It ends. Next *bold* <b>x</b>"),
            "It ends. Next *bold* <b>x</b>"
        );
    }
}
