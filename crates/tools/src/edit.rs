//! The writing tools of change tasks: `write_file`, `edit_file` (one exact, unique
//! replacement) and `apply_patch` (a unified diff, applied all-or-nothing). Every path goes
//! through `warden_repo::candidate::WritableRoot`, which refuses absolute paths, `..` above the
//! root, `.git` and any symlink on the way; refusals and conflicts go back to the model as tool
//! errors. Writes land in the task's copy-on-write view, never in the snapshot or the user's
//! checkout.

use crate::{blocking, describe_text};
use serde_json::{json, Value};
use std::sync::Arc;
use warden_repo::candidate::{WritableRoot, WriteError};
use warden_runtime::{BoxFuture, Tool, ToolOutput, ToolSpec};

/// Largest file content accepted from the model.
const MAX_CONTENT: usize = 1024 * 1024;

fn message(error: &WriteError) -> String {
    match error {
        WriteError::Confined(inner) => format!("refused: {inner}"),
        WriteError::Symlink(_) => format!("refused: {error}"),
        other => other.to_string(),
    }
}

/// `write_file`: creates or replaces a whole file.
pub struct WriteFile {
    root: Arc<WritableRoot>,
}

impl WriteFile {
    pub fn new(root: Arc<WritableRoot>) -> WriteFile {
        WriteFile { root }
    }
}

impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: "Create or overwrite a file with the given content (missing parent \
                directories are created). Paths are relative to the repository root; .git, \
                absolute paths and paths through symlinks are refused."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "content": {"type": "string", "maxLength": MAX_CONTENT}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &Value) -> String {
        format!(
            "write_file {}",
            describe_text(arguments["path"].as_str().unwrap_or_default())
        )
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let root = self.root.clone();
        Box::pin(async move {
            let path = arguments["path"].as_str().unwrap_or_default().to_string();
            let content = arguments["content"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let result = blocking::run(move || {
                root.write(&path, content.as_bytes())
                    .map(|()| format!("wrote {path} ({} bytes)", content.len()))
            })
            .await;
            match result {
                None => ToolOutput::Error("the write crashed Warden's worker thread".into()),
                Some(Ok(text)) => ToolOutput::Ok(text),
                Some(Err(error)) => ToolOutput::Error(message(&error)),
            }
        })
    }
}

/// `edit_file`: replaces exactly one occurrence of `old` with `new`.
pub struct EditFile {
    root: Arc<WritableRoot>,
}

impl EditFile {
    pub fn new(root: Arc<WritableRoot>) -> EditFile {
        EditFile { root }
    }
}

/// The edited text, or the model-facing reason it cannot be edited.
pub fn replace_unique(text: &str, old: &str, new: &str) -> Result<String, String> {
    if old.is_empty() {
        return Err("`old` is empty; give the exact text to replace".into());
    }
    match text.matches(old).count() {
        0 => Err(
            "`old` was not found; read the file and copy the exact text, whitespace \
                  included"
                .into(),
        ),
        1 => Ok(text.replacen(old, new, 1)),
        n => Err(format!(
            "`old` occurs {n} times; include more surrounding lines so it is unique"
        )),
    }
}

impl Tool for EditFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit_file".into(),
            description: "Replace one exact, unique occurrence of `old` with `new` in a file. \
                Fails (and changes nothing) when `old` occurs zero or several times."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "old": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT},
                    "new": {"type": "string", "maxLength": MAX_CONTENT}
                },
                "required": ["path", "old", "new"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &Value) -> String {
        format!(
            "edit_file {}",
            describe_text(arguments["path"].as_str().unwrap_or_default())
        )
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let root = self.root.clone();
        Box::pin(async move {
            let path = arguments["path"].as_str().unwrap_or_default().to_string();
            let old = arguments["old"].as_str().unwrap_or_default().to_string();
            let new = arguments["new"].as_str().unwrap_or_default().to_string();
            let result = blocking::run(move || {
                let bytes = root.read(&path).map_err(|e| message(&e))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| format!("{path} is not UTF-8 text; use write_file"))?;
                let edited = replace_unique(&text, &old, &new)?;
                root.write(&path, edited.as_bytes())
                    .map_err(|e| message(&e))?;
                Ok::<String, String>(format!("edited {path}"))
            })
            .await;
            match result {
                None => ToolOutput::Error("the edit crashed Warden's worker thread".into()),
                Some(Ok(text)) => ToolOutput::Ok(text),
                Some(Err(text)) => ToolOutput::Error(text),
            }
        })
    }
}

/// `apply_patch`: a unified diff over one or more files.
pub struct ApplyPatch {
    root: Arc<WritableRoot>,
}

impl ApplyPatch {
    pub fn new(root: Arc<WritableRoot>) -> ApplyPatch {
        ApplyPatch { root }
    }
}

/// One file of a parsed patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// `None` for a new file (`--- /dev/null`).
    pub old_path: Option<String>,
    /// `None` for a deleted file (`+++ /dev/null`).
    pub new_path: Option<String>,
    pub hunks: Vec<Hunk>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based line where the old block starts (0 for an empty old file).
    pub old_start: usize,
    /// Lines as in the diff: first byte ' ', '-' or '+'.
    pub lines: Vec<String>,
}

fn patch_path(text: &str) -> Option<String> {
    let text = text.split('\t').next().unwrap_or(text).trim_end();
    if text == "/dev/null" {
        return None;
    }
    Some(
        text.strip_prefix("a/")
            .or_else(|| text.strip_prefix("b/"))
            .unwrap_or(text)
            .to_string(),
    )
}

/// `@@ -a[,b] +c[,d] @@` → (a, b, d); a missing count is 1.
fn parse_hunk_header(header: &str) -> Option<(usize, usize, usize)> {
    let rest = header.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |text: &str| -> Option<(usize, usize)> {
        match text.split_once(',') {
            Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
            None => Some((text.parse().ok()?, 1)),
        }
    };
    let (old_start, old_count) = range(old)?;
    let (_, new_count) = range(new)?;
    Some((old_start, old_count, new_count))
}

/// Parses a unified diff (`diff --git` headers and the like are skipped).
pub fn parse_patch(patch: &str) -> Result<Vec<FilePatch>, String> {
    let lines: Vec<&str> = patch.lines().collect();
    let mut files = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if let Some(old) = line.strip_prefix("--- ") {
            let new = lines
                .get(index + 1)
                .and_then(|l| l.strip_prefix("+++ "))
                .ok_or_else(|| format!("line {}: `---` without a `+++` line", index + 1))?;
            let mut file = FilePatch {
                old_path: patch_path(old),
                new_path: patch_path(new),
                hunks: Vec::new(),
            };
            index += 2;
            while index < lines.len() && lines[index].starts_with("@@") {
                let header = lines[index];
                let (old_start, mut old_left, mut new_left) = parse_hunk_header(header)
                    .ok_or_else(|| format!("line {}: bad hunk header {header:?}", index + 1))?;
                index += 1;
                let mut hunk = Hunk {
                    old_start,
                    lines: Vec::new(),
                };
                // The header's counts say where the hunk ends, so a removed line that looks
                // like a header (`--- x`) is still a line of the hunk.
                while index < lines.len() && (old_left > 0 || new_left > 0) {
                    let body = lines[index];
                    index += 1;
                    let (kind, line) = match body.chars().next() {
                        Some('\\') => continue,
                        Some(kind @ (' ' | '-' | '+')) => (kind, body.to_string()),
                        // An empty line inside a hunk is an empty context line.
                        None => (' ', " ".to_string()),
                        Some(_) => {
                            return Err(format!(
                                "line {index}: {body:?} is not a context (space), removed (-) or \
                                 added (+) line, but the hunk header promises more lines"
                            ))
                        }
                    };
                    match kind {
                        ' ' => {
                            old_left = old_left.saturating_sub(1);
                            new_left = new_left.saturating_sub(1);
                        }
                        '-' => old_left = old_left.saturating_sub(1),
                        _ => new_left = new_left.saturating_sub(1),
                    }
                    hunk.lines.push(line);
                }
                if old_left > 0 || new_left > 0 {
                    return Err(format!(
                        "the hunk {header:?} ends early: the patch is truncated"
                    ));
                }
                while index < lines.len() && lines[index].starts_with('\\') {
                    index += 1;
                }
                file.hunks.push(hunk);
            }
            if file.old_path.is_none() && file.new_path.is_none() {
                return Err("a file patch names /dev/null on both sides".into());
            }
            files.push(file);
        } else {
            index += 1;
        }
    }
    if files.is_empty() {
        return Err(
            "no file changes found; give a unified diff with ---/+++ headers and @@ hunks".into(),
        );
    }
    Ok(files)
}

/// Applies one file's hunks to its text. Each hunk's old lines must match exactly, at the line
/// it names or the nearest place around it.
pub fn apply_hunks(text: &str, hunks: &[Hunk]) -> Result<String, String> {
    let trailing_newline = text.is_empty() || text.ends_with('\n');
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut shift: isize = 0;
    for (number, hunk) in hunks.iter().enumerate() {
        let old: Vec<&str> = hunk
            .lines
            .iter()
            .filter(|l| !l.starts_with('+'))
            .map(|l| &l[1..])
            .collect();
        let new: Vec<String> = hunk
            .lines
            .iter()
            .filter(|l| !l.starts_with('-'))
            .map(|l| l[1..].to_string())
            .collect();
        let expected = (hunk.old_start.max(1) as isize - 1 + shift).max(0) as usize;
        let fits = |at: usize| {
            at + old.len() <= lines.len()
                && lines[at..at + old.len()]
                    .iter()
                    .zip(&old)
                    .all(|(a, b)| a == b)
        };
        let found = (0..=lines.len())
            .flat_map(|distance| {
                let before = expected.checked_sub(distance);
                let after = expected + distance;
                [Some(after), before.filter(|_| distance > 0)]
            })
            .take(2 * (lines.len() + 1))
            .flatten()
            .find(|&at| fits(at))
            .ok_or_else(|| {
                format!(
                    "hunk {} (@@ -{}) does not apply: its context and removed lines are not in \
                     the file; read the file again and regenerate the patch",
                    number + 1,
                    hunk.old_start
                )
            })?;
        lines.splice(found..found + old.len(), new.iter().cloned());
        shift += new.len() as isize - old.len() as isize;
    }
    let mut out = lines.join("\n");
    if !lines.is_empty() && trailing_newline {
        out.push('\n');
    }
    Ok(out)
}

impl Tool for ApplyPatch {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "apply_patch".into(),
            description: "Apply a unified diff (---/+++ headers, @@ hunks; /dev/null for new \
                or deleted files). All files apply or none do; a hunk whose context does not \
                match is an error."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "patch": {"type": "string", "minLength": 1, "maxLength": 4 * MAX_CONTENT}
                },
                "required": ["patch"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &Value) -> String {
        let files = arguments["patch"]
            .as_str()
            .and_then(|p| parse_patch(p).ok())
            .map(|files| files.len())
            .unwrap_or(0);
        format!("apply_patch ({files} files)")
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let root = self.root.clone();
        Box::pin(async move {
            let patch = arguments["patch"].as_str().unwrap_or_default().to_string();
            let result = blocking::run(move || apply_patch(&root, &patch)).await;
            match result {
                None => ToolOutput::Error("the patch crashed Warden's worker thread".into()),
                Some(Ok(text)) => ToolOutput::Ok(text),
                Some(Err(text)) => ToolOutput::Error(text),
            }
        })
    }
}

fn apply_patch(root: &WritableRoot, patch: &str) -> Result<String, String> {
    let files = parse_patch(patch)?;
    // Everything is computed first; nothing is written unless every file applies.
    let mut writes: Vec<(String, Option<String>)> = Vec::new();
    for file in &files {
        let old_text = match &file.old_path {
            Some(path) => {
                let bytes = root
                    .read(path)
                    .map_err(|e| format!("{path}: {}", message(&e)))?;
                String::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8 text"))?
            }
            None => String::new(),
        };
        let new_text =
            apply_hunks(&old_text, &file.hunks).map_err(|e| format!("{}: {e}", file_name(file)))?;
        match &file.new_path {
            Some(path) => writes.push((path.clone(), Some(new_text))),
            None => {
                if !new_text.trim().is_empty() {
                    return Err(format!(
                        "{}: the patch deletes the file but does not remove all of its lines",
                        file_name(file)
                    ));
                }
                if let Some(path) = &file.old_path {
                    writes.push((path.clone(), None));
                }
            }
        }
        if let (Some(old), Some(new)) = (&file.old_path, &file.new_path) {
            if old != new {
                writes.push((old.clone(), None));
            }
        }
    }
    let mut summary = Vec::new();
    for (path, content) in writes {
        match content {
            Some(text) => {
                root.write(&path, text.as_bytes())
                    .map_err(|e| format!("{path}: {}", message(&e)))?;
                summary.push(format!("patched {path}"));
            }
            None => {
                root.remove(&path)
                    .map_err(|e| format!("{path}: {}", message(&e)))?;
                summary.push(format!("deleted {path}"));
            }
        }
    }
    Ok(summary.join("\n"))
}

fn file_name(file: &FilePatch) -> String {
    file.new_path
        .clone()
        .or_else(|| file.old_path.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_unique_table() {
        assert_eq!(replace_unique("a b c", "b", "x"), Ok("a x c".into()));
        assert!(replace_unique("a b b", "b", "x")
            .unwrap_err()
            .contains("2 times"));
        assert!(replace_unique("a", "z", "x")
            .unwrap_err()
            .contains("not found"));
        assert!(replace_unique("a", "", "x").is_err());
    }

    #[test]
    fn applies_a_patch_with_offset_and_refuses_a_conflict() {
        let patch = "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n";
        let files = parse_patch(patch).unwrap();
        assert_eq!(files[0].new_path.as_deref(), Some("f.txt"));
        let text = "zero\none\ntwo\nthree\nfour\n";
        assert_eq!(
            apply_hunks(text, &files[0].hunks).unwrap(),
            "zero\none\ntwo\nTHREE\nfour\n"
        );
        let err = apply_hunks("one\ntwo\nthirty\n", &files[0].hunks).unwrap_err();
        assert!(err.contains("does not apply"), "{err}");
        let new = parse_patch("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n").unwrap();
        assert_eq!(new[0].old_path, None);
        assert_eq!(apply_hunks("", &new[0].hunks).unwrap(), "a\nb\n");
        assert!(parse_patch("just text").is_err());
        // A removed line that looks like a file header stays in its hunk.
        let sql = parse_patch("--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- comment\n select\n")
            .unwrap();
        assert_eq!(sql.len(), 1);
        assert_eq!(
            apply_hunks("-- comment\nselect\n", &sql[0].hunks).unwrap(),
            "select\n"
        );
        assert!(parse_patch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n").is_err());
    }
}
