//! Bounded output collection shared by the backends: stdout and stderr together keep at most
//! `limit` bytes; whatever does not fit is dropped and the stream gets a marker line.

use crate::Stream;

/// Collects a command's output under a limit (stdout and stderr together), forwarding what it
/// keeps to a callback; `finish` gives `(stdout, stderr, truncated)`.
pub struct Collector<'a> {
    limit: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_dropped: bool,
    stderr_dropped: bool,
    on_output: &'a mut dyn FnMut(Stream, &[u8]),
}

/// The line appended to a stream that lost output.
pub fn truncation_marker(limit: usize) -> String {
    format!("[output truncated at {limit} bytes]\n")
}

impl<'a> Collector<'a> {
    pub fn new(limit: usize, on_output: &'a mut dyn FnMut(Stream, &[u8])) -> Self {
        Collector {
            limit,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_dropped: false,
            stderr_dropped: false,
            on_output,
        }
    }

    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        let room = self
            .limit
            .saturating_sub(self.stdout.len() + self.stderr.len());
        let (buffer, dropped) = match stream {
            Stream::Stdout => (&mut self.stdout, &mut self.stdout_dropped),
            Stream::Stderr => (&mut self.stderr, &mut self.stderr_dropped),
        };
        let keep = if *dropped { 0 } else { room.min(data.len()) };
        if keep > 0 {
            buffer.extend_from_slice(&data[..keep]);
            (self.on_output)(stream, &data[..keep]);
        }
        if keep < data.len() && !*dropped {
            *dropped = true;
            let mut marker = String::new();
            if buffer.last().is_some_and(|&byte| byte != b'\n') {
                marker.push('\n');
            }
            marker.push_str(&truncation_marker(self.limit));
            buffer.extend_from_slice(marker.as_bytes());
            (self.on_output)(stream, marker.as_bytes());
        }
    }

    /// `(stdout, stderr, truncated)`.
    pub fn finish(self) -> (Vec<u8>, Vec<u8>, bool) {
        let truncated = self.stdout_dropped || self.stderr_dropped;
        (self.stdout, self.stderr, truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: usize, chunks: &[(Stream, &str)], expect: (&str, &str, bool)) {
        let mut seen = Vec::new();
        let mut callback = |stream: Stream, data: &[u8]| seen.push((stream, data.to_vec()));
        let mut collector = Collector::new(limit, &mut callback);
        for (stream, data) in chunks {
            collector.push(*stream, data.as_bytes());
        }
        let (stdout, stderr, truncated) = collector.finish();
        let got = (
            String::from_utf8(stdout).unwrap(),
            String::from_utf8(stderr).unwrap(),
            truncated,
        );
        assert_eq!((got.0.as_str(), got.1.as_str(), got.2), expect);
        // The callback saw exactly what was kept.
        let streamed_out: Vec<u8> = seen
            .iter()
            .filter(|(s, _)| *s == Stream::Stdout)
            .flat_map(|(_, d)| d.clone())
            .collect();
        assert_eq!(streamed_out, expect.0.as_bytes());
    }

    #[test]
    fn keeps_everything_under_the_limit() {
        check(
            10,
            &[(Stream::Stdout, "abc"), (Stream::Stderr, "de")],
            ("abc", "de", false),
        );
    }

    #[test]
    fn truncates_both_streams_together() {
        check(
            5,
            &[
                (Stream::Stdout, "abc\n"),
                (Stream::Stderr, "xyz"),
                (Stream::Stdout, "more"),
            ],
            (
                "abc\n[output truncated at 5 bytes]\n",
                "x\n[output truncated at 5 bytes]\n",
                true,
            ),
        );
    }

    #[test]
    fn zero_limit_keeps_only_markers() {
        check(
            0,
            &[(Stream::Stdout, "a"), (Stream::Stdout, "b")],
            ("[output truncated at 0 bytes]\n", "", true),
        );
    }
}
