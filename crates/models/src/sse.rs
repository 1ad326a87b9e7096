//! An incremental Server-Sent Events parser: bytes in as they arrive, complete events out.
//! Only what model providers use: `event:` and `data:` fields, comment lines, any line ending.
//! What it buffers is capped: a line, or an event's joined `data`, longer than its limit is an
//! error rather than memory a misbehaving server can fill.

/// One dispatched event. `data` joins multiple `data:` lines with `\n`, as the SSE spec says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// A line, or an event's joined `data`, went past the parser's limit (in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventTooLarge {
    pub limit: usize,
}

#[derive(Debug)]
pub(crate) struct SseParser {
    /// The longest line, and the longest joined `data` of one event, in bytes.
    limit: usize,
    /// Bytes of a line not yet terminated.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next chunk belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
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
            _ => {} // `id:`, `retry:` and unknown fields mean nothing to a model client
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let data = self.data.take()?;
        Some(SseEvent { event, data })
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
