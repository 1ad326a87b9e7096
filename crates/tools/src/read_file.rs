//! `read_file`: numbered lines of one text file, paged so that no file floods the context.
//!
//! Output: `{path} (lines A-B of N)`, then `{n:>6}\t{text}` per line, then, when lines of the
//! requested range remain, `[... R more lines; call read_file with start_line=B+1]`.

use crate::workspace::{Location, Workspace};
use crate::{arguments, blocking, describe_text, truncate_chars};
use serde::Deserialize;
use serde_json::json;
use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use warden_runtime::{BoxFuture, Tool, ToolOutput, ToolSpec};

/// Most lines returned by one call.
pub(crate) const MAX_LINES: u64 = 400;
/// Most bytes of numbered lines returned by one call.
pub(crate) const MAX_BYTES: usize = 64 * 1024;
/// Longest line shown, in characters.
pub(crate) const MAX_LINE_CHARS: usize = 2000;
/// A NUL byte in this many leading bytes marks a binary file.
const BINARY_PROBE: usize = 8 * 1024;

pub(crate) struct ReadFile {
    workspace: Arc<Workspace>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    path: String,
    start_line: Option<u64>,
    end_line: Option<u64>,
}

impl ReadFile {
    pub(crate) fn new(workspace: Arc<Workspace>) -> ReadFile {
        ReadFile { workspace }
    }
}

impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: format!(
                "Read a text file with line numbers. The first line of the result is \
                 `path (lines A-B of N)` where N is the file's line count; each following line is \
                 a line number, a tab and the line's text. One call returns at most {MAX_LINES} \
                 lines or 64 KiB; when more remain, a last line says which start_line to continue \
                 from. Lines longer than {MAX_LINE_CHARS} characters are cut. Give start_line and \
                 end_line to read just a range, e.g. around a search match. Binary files are \
                 refused.{}",
                crate::path_help(&self.workspace)
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the working root."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (1-based). Default 1."},
                    "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show, inclusive. Default: as many as fit in one call."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &serde_json::Value) -> String {
        let path = describe_text(arguments["path"].as_str().unwrap_or_default());
        let start = arguments["start_line"].as_u64();
        let end = arguments["end_line"].as_u64();
        match (start, end) {
            (None, None) => format!("read_file {path}"),
            (start, end) => format!(
                "read_file {path}:{}-{}",
                start.unwrap_or(1),
                end.map(|e| e.to_string()).unwrap_or_default()
            ),
        }
    }

    fn call<'a>(&'a self, arguments: serde_json::Value) -> BoxFuture<'a, ToolOutput> {
        let workspace = self.workspace.clone();
        Box::pin(async move {
            let arguments: Arguments = match arguments::parse(arguments) {
                Ok(arguments) => arguments,
                Err(output) => return output,
            };
            blocking::run(move || read_file(&workspace, &arguments))
                .await
                .unwrap_or_else(|| ToolOutput::Error("read_file failed unexpectedly".into()))
        })
    }
}

fn read_file(workspace: &Workspace, arguments: &Arguments) -> ToolOutput {
    let start = arguments.start_line.unwrap_or(1);
    if start == 0 {
        return ToolOutput::Error("start_line must be 1 or more: lines are numbered from 1".into());
    }
    if let Some(end) = arguments.end_line {
        if end < start {
            return ToolOutput::Error(format!("end_line {end} is before start_line {start}"));
        }
    }
    let resolved = match workspace.locate(&arguments.path) {
        Ok(Location::Inside { resolved, .. }) => resolved,
        Ok(Location::WorkingRoot) => {
            return ToolOutput::Error(format!(
                "{:?} is the working root, a directory; use list_dir to see its entries",
                arguments.path
            ))
        }
        Err(message) => return ToolOutput::Error(message),
    };
    let shown = workspace.display_path(&resolved.repo, &resolved.relative);
    // Check the kind before opening: opening a FIFO or device could block or never end.
    match std::fs::metadata(&resolved.absolute) {
        Ok(meta) if meta.is_dir() => {
            return ToolOutput::Error(format!(
                "{shown} is a directory; use list_dir to see its entries"
            ))
        }
        Ok(meta) if !meta.is_file() => {
            return ToolOutput::Error(format!("{shown} is not a regular file"))
        }
        Ok(_) => {}
        Err(err) => return ToolOutput::Error(format!("cannot read {shown}: {err}")),
    }
    let page = match File::open(&resolved.absolute)
        .and_then(|file| Page::read(file, start, arguments.end_line))
    {
        Ok(Some(page)) => page,
        Ok(None) => {
            return ToolOutput::Error(format!(
                "{shown} is a binary file (it contains NUL bytes); read_file shows text files only"
            ))
        }
        Err(err) => return ToolOutput::Error(format!("cannot read {shown}: {err}")),
    };
    page.render(&shown, start, arguments.end_line)
}

/// The lines of one call and the file's line count.
#[derive(Debug)]
struct Page {
    body: String,
    shown: u64,
    total: u64,
}

impl Page {
    /// Streams the file once: keeps the numbered lines of the page, counts the rest. Memory stays
    /// bounded whatever the file's size or line length. `None` for a binary file.
    fn read(mut file: File, start: u64, end: Option<u64>) -> std::io::Result<Option<Page>> {
        // Enough bytes to hold MAX_LINE_CHARS characters plus one, however they are encoded.
        const LINE_BYTES: usize = (MAX_LINE_CHARS + 1) * 4;
        let last_wanted = end.unwrap_or(u64::MAX);
        let mut buffer = vec![0u8; 64 * 1024];
        let mut page = Page {
            body: String::new(),
            shown: 0,
            total: 0,
        };
        let mut line = 1u64; // the line the next byte belongs to
        let mut collecting = true;
        let mut current: Vec<u8> = Vec::new();
        let mut bytes_seen = 0usize;
        let mut last_byte = b'\n';
        loop {
            let read = match file.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            let chunk_all = &buffer[..read];
            if bytes_seen < BINARY_PROBE {
                let probe = &chunk_all[..chunk_all.len().min(BINARY_PROBE - bytes_seen)];
                if probe.contains(&0) {
                    return Ok(None);
                }
            }
            bytes_seen = bytes_seen.saturating_add(read);
            last_byte = chunk_all[read - 1];
            let mut chunk = chunk_all;
            while !chunk.is_empty() {
                if collecting && line >= start && line <= last_wanted {
                    let (content, rest, complete) = match chunk.iter().position(|&b| b == b'\n') {
                        Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                        None => (chunk, &chunk[..0], false),
                    };
                    let room = LINE_BYTES.saturating_sub(current.len());
                    current.extend_from_slice(&content[..content.len().min(room)]);
                    chunk = rest;
                    if complete {
                        collecting = page.push(line, &current);
                        current.clear();
                        line += 1;
                    }
                } else if collecting && line < start {
                    match chunk.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            line += 1;
                            chunk = &chunk[i + 1..];
                        }
                        None => chunk = &chunk[..0],
                    }
                } else {
                    line += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
                    chunk = &chunk[..0];
                }
            }
        }
        if bytes_seen == 0 {
            return Ok(Some(page));
        }
        let unterminated = last_byte != b'\n';
        if unterminated && collecting && line >= start && line <= last_wanted {
            page.push(line, &current);
        }
        page.total = line - 1 + u64::from(unterminated);
        Ok(Some(page))
    }

    /// Adds line `number`; false (and nothing added) once the page is full.
    fn push(&mut self, number: u64, bytes: &[u8]) -> bool {
        if self.shown >= MAX_LINES {
            return false;
        }
        let text = String::from_utf8_lossy(bytes);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        let (text, cut) = truncate_chars(text, MAX_LINE_CHARS);
        let marker = if cut { " [line truncated]" } else { "" };
        let formatted = format!("{number:>6}\t{text}{marker}\n");
        if self.shown > 0 && self.body.len() + formatted.len() > MAX_BYTES {
            return false;
        }
        self.body.push_str(&formatted);
        self.shown += 1;
        true
    }

    fn render(self, shown_path: &str, start: u64, end: Option<u64>) -> ToolOutput {
        if self.total == 0 {
            return ToolOutput::Ok(format!("{shown_path} (empty file)"));
        }
        if start > self.total {
            return ToolOutput::Error(format!(
                "start_line {start} is beyond the end of {shown_path}, which has {} lines",
                self.total
            ));
        }
        let last = start + self.shown - 1;
        let wanted_end = end.unwrap_or(self.total).min(self.total);
        let mut out = format!("{shown_path} (lines {start}-{last} of {})\n", self.total);
        out.push_str(&self.body);
        if wanted_end > last {
            out.push_str(&format!(
                "[... {} more lines; call read_file with start_line={}]\n",
                wanted_end - last,
                last + 1
            ));
        }
        // One trailing newline is noise to the model.
        out.truncate(out.trim_end_matches('\n').len());
        ToolOutput::Ok(out)
    }
}
