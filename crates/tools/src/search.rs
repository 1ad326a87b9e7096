//! `search`: ripgrep's engine (grep-regex, grep-searcher, ignore) over the working root.
//!
//! Output: `{path}:{line}:{text}` per matching line, files in path order and lines in order; at
//! most [`MAX_MATCHES`] lines, then `[... N more matches not shown; narrow the pattern, path or
//! glob]` (`at least N` once [`COUNT_CAP`] matching lines have been counted).
//!
//! The walk is parallel, so files finish in any order, yet the output must be the first matches
//! in path order. Each file keeps at most [`MAX_MATCHES`] lines; a shared [`Collector`] keeps only
//! the files that can still be among the first [`MAX_MATCHES`] lines and publishes a *bound*,
//! the last path that can. Files past the bound are only counted, and once [`COUNT_CAP`] lines
//! are counted they are not searched at all. Counting stops only after the cap is reached, so
//! whether the count is exact does not depend on timing: the output is deterministic.

use crate::walk::{slash_path, Scope};
use crate::workspace::{Checkout, Location, Workspace};
use crate::{arguments, blocking, describe_text, truncate_chars};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::WalkState;
use serde::Deserialize;
use serde_json::json;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use warden_runtime::{BoxFuture, Tool, ToolOutput, ToolSpec};

/// Most matching lines shown by one call.
pub(crate) const MAX_MATCHES: usize = 200;
/// Matching lines are counted exactly up to this many; beyond it the output says "at least".
pub(crate) const COUNT_CAP: usize = 10_000;
/// Longest line text shown, in characters.
pub(crate) const MAX_TEXT_CHARS: usize = 300;
/// Files up to this size are read whole and searched as one slice (binary detection then covers
/// the whole file); larger ones are streamed.
const WHOLE_FILE_LIMIT: usize = 16 * 1024 * 1024;

pub(crate) struct Search {
    workspace: Arc<Workspace>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    case_insensitive: bool,
}

impl Search {
    pub(crate) fn new(workspace: Arc<Workspace>) -> Search {
        Search { workspace }
    }
}

impl Tool for Search {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "search".into(),
            description: format!(
                "Search file contents, like ripgrep. pattern is a regular expression (Rust regex \
                 syntax: escape `(`, `[`, `.`, `{{` etc., or set literal to true to match the \
                 text exactly). Returns one line per matching line, `path:line_number:text`, \
                 files in path order; lines longer than {MAX_TEXT_CHARS} characters are cut. \
                 Files ignored by .gitignore or .ignore, binary files and .git are skipped; \
                 symlinks are not followed. path limits the search to a directory or file; glob \
                 keeps only files whose names match (`*.rs`, `*.{{ts,tsx}}`) or, with a leading \
                 `!`, drops them (`!*_test.go`); a glob containing `/` is matched against the \
                 path inside its repository. Matching is case-sensitive unless case_insensitive \
                 is true. At most {MAX_MATCHES} matching lines are shown; if there are more, \
                 narrow the pattern, path or glob.{}",
                crate::path_help(&self.workspace)
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax), or the exact text when literal is true."},
                    "path": {"type": "string", "description": "Directory or file to search, relative to the working root. Default: everything."},
                    "glob": {"type": "string", "description": "File name filter such as \"*.rs\" or \"!*.md\"."},
                    "literal": {"type": "boolean", "description": "Match pattern as plain text instead of a regular expression. Default false."},
                    "case_insensitive": {"type": "boolean", "description": "Ignore case when matching. Default false."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &serde_json::Value) -> String {
        let pattern = describe_text(arguments["pattern"].as_str().unwrap_or_default());
        let mut line = format!("search \"{pattern}\"");
        if let Some(path) = arguments["path"].as_str() {
            line.push_str(&format!(" in {}", describe_text(path)));
        }
        if let Some(glob) = arguments["glob"].as_str() {
            line.push_str(&format!(" ({})", describe_text(glob)));
        }
        line
    }

    fn call<'a>(&'a self, arguments: serde_json::Value) -> BoxFuture<'a, ToolOutput> {
        let workspace = self.workspace.clone();
        Box::pin(async move {
            let arguments: Arguments = match arguments::parse(arguments) {
                Ok(arguments) => arguments,
                Err(output) => return output,
            };
            blocking::run(move || search(&workspace, &arguments))
                .await
                .unwrap_or_else(|| ToolOutput::Error("search failed unexpectedly".into()))
        })
    }
}

fn search(workspace: &Workspace, arguments: &Arguments) -> ToolOutput {
    if arguments.pattern.is_empty() {
        return ToolOutput::Error("pattern is empty; give the text or regex to look for".into());
    }
    let matcher = match RegexMatcherBuilder::new()
        .fixed_strings(arguments.literal)
        .case_insensitive(arguments.case_insensitive)
        // Lets the searcher look for candidates across whole buffers instead of line by line,
        // as ripgrep does; a pattern that must match `\n` is refused.
        .line_terminator(Some(b'\n'))
        .build(&arguments.pattern)
    {
        Ok(matcher) => matcher,
        Err(err) => return ToolOutput::Error(format!("invalid pattern: {err}")),
    };
    let path = arguments.path.as_deref().unwrap_or(".");
    let targets: Vec<(usize, &Checkout, PathBuf)> = match workspace.locate(path) {
        Err(message) => return ToolOutput::Error(message),
        Ok(Location::WorkingRoot) => workspace
            .checkouts()
            .iter()
            .enumerate()
            .map(|(index, checkout)| (index, checkout, checkout.root.path().to_path_buf()))
            .collect(),
        Ok(Location::Inside { checkout, resolved }) => {
            let index = workspace
                .checkouts()
                .iter()
                .position(|c| std::ptr::eq(c, checkout))
                .unwrap_or(0);
            vec![(index, checkout, resolved.absolute)]
        }
    };
    let collector = Collector::default();
    for (index, checkout, target) in targets {
        let overrides = match arguments
            .glob
            .as_deref()
            .map(|g| glob(checkout.root.path(), g))
        {
            None => None,
            Some(Ok(overrides)) => Some(overrides),
            Some(Err(message)) => return ToolOutput::Error(message),
        };
        let repo = RepoSearch {
            workspace,
            checkout,
            index,
            matcher: &matcher,
            collector: &collector,
        };
        if target.is_dir() {
            let scope = Scope {
                root: checkout.root.path().to_path_buf(),
                target,
            };
            repo.search_dir(&scope, overrides);
        } else if target.is_file() {
            let excluded = overrides
                .as_ref()
                .is_some_and(|o| o.matched(&target, false).is_ignore());
            if !excluded {
                let mut worker = Worker::new(&matcher);
                worker.search_file(&repo, &target);
            }
        }
    }
    collector.render(&arguments.pattern)
}

fn glob(root: &Path, glob: &str) -> Result<Override, String> {
    OverrideBuilder::new(root)
        .add(glob)
        .and_then(|builder| builder.build())
        .map_err(|err| format!("invalid glob {glob:?}: {err}"))
}

/// The search of one checkout.
struct RepoSearch<'a> {
    workspace: &'a Workspace,
    checkout: &'a Checkout,
    /// Position of the checkout in the workspace's sorted list: the first part of the sort key.
    index: usize,
    matcher: &'a RegexMatcher,
    collector: &'a Collector,
}

impl RepoSearch<'_> {
    fn search_dir(&self, scope: &Scope, overrides: Option<Override>) {
        let reached_target = AtomicBool::new(scope.target == scope.root);
        let walk = |builder: ignore::WalkBuilder| {
            builder.build_parallel().run(|| {
                let mut worker = Worker::new(self.matcher);
                let reached_target = &reached_target;
                Box::new(move |entry| {
                    let Ok(entry) = entry else {
                        return WalkState::Continue;
                    };
                    let path = entry.path();
                    if entry.file_type().is_some_and(|t| t.is_file()) {
                        if path.starts_with(&scope.target) {
                            worker.search_file(self, path);
                        }
                    } else if path == scope.target {
                        reached_target.store(true, Ordering::Relaxed);
                    }
                    WalkState::Continue
                })
            })
        };
        let mut builder = scope.builder(overrides.clone());
        builder.threads(threads());
        walk(builder);
        if !reached_target.load(Ordering::Relaxed) {
            let mut builder = scope.fallback(overrides);
            builder.threads(threads());
            walk(builder);
        }
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(12))
}

/// Per-thread search state: its own matcher (so threads share no regex cache), searchers and a
/// read buffer reused from file to file.
struct Worker {
    matcher: RegexMatcher,
    /// For whole files in memory; binary detection is done on the whole buffer beforehand.
    slice_searcher: Searcher,
    /// For files too large to hold; quits on the first NUL byte.
    stream_searcher: Searcher,
    buffer: Vec<u8>,
}

impl Worker {
    fn new(matcher: &RegexMatcher) -> Worker {
        let mut builder = SearcherBuilder::new();
        builder.line_number(true);
        let slice_searcher = builder.binary_detection(BinaryDetection::none()).build();
        let stream_searcher = builder.binary_detection(BinaryDetection::quit(0)).build();
        Worker {
            matcher: matcher.clone(),
            slice_searcher,
            stream_searcher,
            buffer: Vec::new(),
        }
    }

    fn search_file(&mut self, repo: &RepoSearch<'_>, path: &Path) {
        let Some(relative) = repo.checkout.relative_of(path) else {
            return;
        };
        let collector = repo.collector;
        let position = (repo.index, relative);
        let record = collector.may_need(position);
        if !record && collector.count_is_capped() {
            return;
        }
        let Ok(file) = File::open(path) else {
            return;
        };
        let mut sink = FileSink {
            record,
            lines: Vec::new(),
            total: &collector.counted,
            live_count: true,
            local_count: 0,
            binary: false,
        };
        let text = self.search_contents(&file, &mut sink);
        // Keep the buffer grown for one large file from pinning memory for the rest of the walk.
        if self.buffer.len() > 4 * 1024 * 1024 {
            self.buffer = Vec::new();
        }
        if text && !sink.lines.is_empty() {
            let shown = repo
                .workspace
                .display_path(&repo.checkout.name, &slash_path(relative));
            collector.add(FileMatches {
                key: (repo.index, relative.to_path_buf()),
                shown,
                lines: sink.lines,
            });
        }
    }

    /// Searches the file's contents into `sink`; false if the file is binary or unreadable.
    fn search_contents(&mut self, file: &File, sink: &mut FileSink<'_>) -> bool {
        match read_whole(file, &mut self.buffer) {
            Err(_) => false,
            Ok(Some(len)) => {
                let contents = &self.buffer[..len];
                if contents.contains(&0) {
                    return false;
                }
                let _ = self
                    .slice_searcher
                    .search_slice(&self.matcher, contents, sink);
                true
            }
            Ok(None) => {
                // Too large to hold: stream the part already read and then the rest, to the end
                // or the first NUL byte, and count it only once it has proved to be text.
                sink.live_count = false;
                let rest = std::io::Read::chain(&self.buffer[..], file);
                let searched = self
                    .stream_searcher
                    .search_reader(&self.matcher, rest, &mut *sink);
                if searched.is_err() || sink.binary {
                    return false;
                }
                sink.total.fetch_add(sink.local_count, Ordering::Relaxed);
                true
            }
        }
    }
}

/// Reads a whole file into `buffer` (kept initialised and reused, so each read asks for all the
/// room there is: usually one read and one end-of-file read per file). `None` when the file is
/// larger than [`WHOLE_FILE_LIMIT`].
fn read_whole(mut file: &File, buffer: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    const INITIAL: usize = 64 * 1024;
    if buffer.len() < INITIAL {
        buffer.resize(INITIAL, 0);
    }
    let mut filled = 0;
    loop {
        if filled == buffer.len() {
            if filled > WHOLE_FILE_LIMIT {
                return Ok(None);
            }
            buffer.resize((filled * 2).min(WHOLE_FILE_LIMIT + 1), 0);
        }
        match file.read(&mut buffer[filled..]) {
            Ok(0) => return Ok(Some(filled)),
            Ok(read) => filled += read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// Receives the matching lines of one file.
struct FileSink<'a> {
    record: bool,
    lines: Vec<(u64, String)>,
    total: &'a AtomicUsize,
    /// Whether matches count toward the shared total as they are found (whole files) or only
    /// once the file is known to be text (streamed files).
    live_count: bool,
    local_count: usize,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.local_count += 1;
        if self.record && self.lines.len() < MAX_MATCHES {
            let number = found.line_number().unwrap_or(0);
            self.lines.push((number, line_text(found.bytes())));
        }
        if !self.live_count {
            // A streamed file is read to its end so that a NUL byte anywhere marks it binary.
            return Ok(true);
        }
        let counted = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        let wants_lines = self.record && self.lines.len() < MAX_MATCHES;
        Ok(wants_lines || counted < COUNT_CAP)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// The shown text of a matching line: no line terminator, at most [`MAX_TEXT_CHARS`] characters.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    // Decode no more than can be shown: a minified file may hold megabytes on one line.
    let limit = (MAX_TEXT_CHARS + 1) * 4;
    let head = &bytes[..bytes.len().min(limit)];
    let text = String::from_utf8_lossy(head);
    let (text, cut) = truncate_chars(&text, MAX_TEXT_CHARS);
    if cut {
        format!("{text} [truncated]")
    } else {
        text.to_string()
    }
}

/// `(checkout index, path relative to the checkout)`: the output order.
type SortKey = (usize, PathBuf);

struct FileMatches {
    key: SortKey,
    shown: String,
    lines: Vec<(u64, String)>,
}

#[derive(Default)]
struct Collector {
    /// Matching lines counted so far (exact while below [`COUNT_CAP`]).
    counted: AtomicUsize,
    /// Set once `kept` holds [`MAX_MATCHES`] lines, so `bound` is worth reading.
    bounded: AtomicBool,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Sorted by key; only files that can hold one of the first [`MAX_MATCHES`] lines.
    files: Vec<FileMatches>,
    /// The last key that can still hold one of the first lines, once known.
    bound: Option<SortKey>,
}

impl Collector {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a file at `position` could hold one of the first lines of the output.
    fn may_need(&self, position: (usize, &Path)) -> bool {
        if !self.bounded.load(Ordering::Acquire) {
            return true;
        }
        match &self.lock().bound {
            Some((index, path)) => position < (*index, path.as_path()),
            None => true,
        }
    }

    fn count_is_capped(&self) -> bool {
        self.counted.load(Ordering::Relaxed) >= COUNT_CAP
    }

    fn add(&self, matches: FileMatches) {
        let mut kept = self.lock();
        if kept
            .bound
            .as_ref()
            .is_some_and(|bound| matches.key > *bound)
        {
            return;
        }
        let at = kept
            .files
            .binary_search_by(|f| f.key.cmp(&matches.key))
            .unwrap_or_else(|at| at);
        kept.files.insert(at, matches);
        let mut lines = 0;
        let full = kept.files.iter().position(|f| {
            lines += f.lines.len();
            lines >= MAX_MATCHES
        });
        if let Some(last) = full {
            kept.files.truncate(last + 1);
            kept.bound = Some(kept.files[last].key.clone());
            self.bounded.store(true, Ordering::Release);
        }
    }

    fn render(self, pattern: &str) -> ToolOutput {
        let counted = self.counted.load(Ordering::Relaxed);
        let kept = self
            .kept
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let mut shown = 0;
        'files: for file in &kept.files {
            for (number, text) in &file.lines {
                if shown == MAX_MATCHES {
                    break 'files;
                }
                out.push_str(&format!("{}:{number}:{text}\n", file.shown));
                shown += 1;
            }
        }
        if shown == 0 {
            return ToolOutput::Ok(format!("no matches for {pattern}"));
        }
        if counted >= COUNT_CAP {
            out.push_str(&format!(
                "[... at least {} more matches not shown; narrow the pattern, path or glob]",
                COUNT_CAP - shown
            ));
        } else if counted > shown {
            out.push_str(&format!(
                "[... {} more matches not shown; narrow the pattern, path or glob]",
                counted - shown
            ));
        }
        out.truncate(out.trim_end_matches('\n').len());
        ToolOutput::Ok(out)
    }
}
