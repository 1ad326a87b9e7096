//! An incremental Server-Sent Events parser: bytes in as they arrive, complete events out.
//! Warden's one SSE parser: model provider streams (in `endpoint`) and the CLI following
//! `warden serve`'s task events both use it. It reads the `event:`, `data:` and `id:` fields,
//! skips comment lines (keep-alives), and accepts any line ending (`\n`, `\r\n`, `\r`), split
//! anywhere between chunks.
//! What it buffers is capped: a line, or an event's joined `data`, longer than its limit is an
//! error rather than memory a misbehaving server can fill.

use std::fmt;

/// One dispatched event. `data` joins multiple `data:` lines with `\n`, as the SSE spec says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The stream's last event id when the event was dispatched: the value of the last `id:`
    /// field seen so far on the stream, on this event or an earlier one (as the SSE spec says;
    /// a value containing NUL is ignored). What a client resumes from with `Last-Event-ID`.
    pub id: Option<String>,
    /// The event's `event:` field (its type), when it had one.
    pub event: Option<String>,
    /// The event's `data:` lines, joined with `\n`.
    pub data: String,
}

/// A line, or an event's joined `data`, went past the parser's limit (in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTooLarge {
    /// The parser's limit, in bytes.
    pub limit: usize,
}

impl fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a server-sent event (or one of its lines) is larger than {} bytes",
            self.limit
        )
    }
}

impl std::error::Error for EventTooLarge {}

/// The parser's state between chunks. Events without any `data:` line are not dispatched
/// (their `event:` name is dropped, their `id:` kept), as the SSE spec says.
#[derive(Debug)]
pub struct SseParser {
    /// The longest line, and the longest joined `data` of one event, in bytes.
    limit: usize,
    /// Bytes of a line not yet terminated.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next chunk belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    /// The last `id:` seen on the stream; it carries over from event to event.
    id: Option<String>,
}

impl SseParser {
    /// A parser refusing lines and events longer than `limit` bytes.
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            limit,
            line: Vec::new(),
            after_cr: false,
            event: None,
            data: None,
            id: None,
        }
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, EventTooLarge> {
        let mut out = Vec::new();
        for &byte in bytes {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_complete(&line)? {
                        out.push(event);
                    }
                }
                _ if self.line.len() >= self.limit => {
                    return Err(EventTooLarge { limit: self.limit })
                }
                _ => self.line.push(byte),
            }
        }
        Ok(out)
    }

    /// The stream ended cleanly: an event left without its closing blank line is still delivered
    /// (some servers end with `data: [DONE]\n` and nothing after).
    pub fn finish(&mut self) -> Result<Option<SseEvent>, EventTooLarge> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            if let Some(event) = self.line_complete(&line)? {
                return Ok(Some(event));
            }
        }
        Ok(self.dispatch())
    }

    fn line_complete(&mut self, line: &[u8]) -> Result<Option<SseEvent>, EventTooLarge> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line.first() == Some(&b':') {
            return Ok(None); // comment, e.g. `: PROCESSING` or a keep-alive
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    if data.len() + 1 + value.len() > self.limit {
                        return Err(EventTooLarge { limit: self.limit });
                    }
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {} // `retry:` and unknown fields mean nothing to Warden's clients
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let data = self.data.take()?;
        Some(SseEvent {
            id: self.id.clone(),
            event,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &str, piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::new(1 << 20);
        let mut events = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            events.extend(parser.push(chunk).unwrap());
        }
        events.extend(parser.finish().unwrap());
        events
    }

    fn data(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: None,
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn parses_the_same_whatever_the_chunking() {
        let input = ": PROCESSING\n\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\r\n\r\ndata: x\rdata: y\r\rdata:[DONE]\n\n";
        let expected = vec![
            data(None, "{\"a\":1}"),
            data(Some("ping"), "{}"),
            data(None, "x\ny"),
            data(None, "[DONE]"),
        ];
        for piece in 1..input.len() {
            assert_eq!(
                parse_in_pieces(input, piece),
                expected,
                "piece size {piece}"
            );
        }
    }

    #[test]
    fn delivers_a_last_event_without_blank_line_and_ignores_lone_event_names() {
        assert_eq!(
            parse_in_pieces("event: x\n\ndata: [DONE]", 4),
            vec![data(None, "[DONE]")]
        );
    }

    fn with_id(id: &str, event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: Some(id.to_string()),
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn warden_event_streams_parse_with_ids_keep_alives_multiline_data_and_crlf() {
        // What `warden serve` sends, with CRLF line ends and a `data:` without its space.
        let input = ": keep-alive\n\nid: 1\nevent: tool_started\ndata: {\"a\":1}\n\n\
                     : keep-alive\r\nid: 2\r\ndata: line one\r\ndata:line two\r\n\r\n";
        let expected = vec![
            with_id("1", Some("tool_started"), "{\"a\":1}"),
            with_id("2", None, "line one\nline two"),
        ];
        for piece in 1..input.len() {
            assert_eq!(
                parse_in_pieces(input, piece),
                expected,
                "piece size {piece}"
            );
        }
    }

    #[test]
    fn the_last_event_id_carries_over_and_ignores_values_with_nul() {
        let input =
            "id: 1\ndata: a\n\ndata: b\n\nid: 2\nevent: x\n\nid: 3\0\ndata: c\n\nid:\ndata: d\n\n";
        assert_eq!(
            parse_in_pieces(input, 3),
            vec![
                with_id("1", None, "a"),
                // No `id:` of its own: the stream's last one.
                with_id("1", None, "b"),
                // `id: 2` came with an event that had no data (not dispatched) and is kept;
                // `3\0` is ignored.
                with_id("2", None, "c"),
                // An empty `id:` resets it.
                with_id("", None, "d"),
            ]
        );
    }

    #[test]
    fn an_unfinished_event_waits_for_its_blank_line() {
        let mut parser = SseParser::new(1 << 20);
        assert_eq!(parser.push(b"id: 3\ndata: x\n"), Ok(vec![]));
        assert_eq!(parser.push(b"\r\n"), Ok(vec![with_id("3", None, "x")]));
    }

    #[test]
    fn lines_and_events_past_the_limit_are_refused() {
        let too_large = Err(EventTooLarge { limit: 16 });
        // One line without an end.
        let mut parser = SseParser::new(16);
        assert_eq!(parser.push(b"data: 0123456789"), Ok(vec![]));
        assert_eq!(parser.push(b"abcdef"), too_large);
        // Short lines adding up to one long event.
        let mut parser = SseParser::new(16);
        assert_eq!(parser.push(b"data: 01234567\ndata: 0123"), Ok(vec![]));
        assert_eq!(parser.push(b"\n"), Ok(vec![]));
        assert_eq!(parser.push(b"data: 0123\n"), too_large);
        // Right at the limit is fine.
        let mut parser = SseParser::new(16);
        assert_eq!(
            parser.push(b"data: 0123456789\n\n"),
            Ok(vec![data(None, "0123456789")])
        );
    }
}
