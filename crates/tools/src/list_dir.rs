//! `list_dir`: the entries under a directory, a few levels deep, in tree order.
//!
//! Output: one path per line (relative to the working root, directories ending in `/`), sorted
//! component by component so a directory's entries follow it; at most [`MAX_ENTRIES`] lines, then
//! `[... N more entries not shown; list a subdirectory]`.

use crate::walk::{slash_path, Scope};
use crate::workspace::{Checkout, Location, Workspace};
use crate::{arguments, blocking, describe_text};
use serde::Deserialize;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use warden_runtime::{BoxFuture, Tool, ToolOutput, ToolSpec};

/// Most entries listed by one call.
pub(crate) const MAX_ENTRIES: usize = 500;
/// Deepest listing one call may ask for.
pub(crate) const MAX_DEPTH: u64 = 4;

pub(crate) struct ListDir {
    workspace: Arc<Workspace>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    path: Option<String>,
    depth: Option<u64>,
}

impl ListDir {
    pub(crate) fn new(workspace: Arc<Workspace>) -> ListDir {
        ListDir { workspace }
    }
}

impl Tool for ListDir {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: format!(
                "List the files and directories under a directory (default: the working root), \
                 one path per line relative to the working root; directories end with `/`. \
                 depth 1 (the default) lists the directory's own entries, depth 2 also their \
                 entries, and so on up to {MAX_DEPTH}. Files ignored by .gitignore or .ignore \
                 are not listed, nor is .git. At most {MAX_ENTRIES} entries are shown; list a \
                 subdirectory to see more.{}",
                crate::path_help(&self.workspace)
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the working root. Default \".\"."},
                    "depth": {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH, "description": "Levels to list, 1 to 4. Default 1."}
                },
                "required": [],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &serde_json::Value) -> String {
        let path = describe_text(arguments["path"].as_str().unwrap_or("."));
        match arguments["depth"].as_u64() {
            Some(depth) if depth != 1 => format!("list_dir {path} (depth {depth})"),
            _ => format!("list_dir {path}"),
        }
    }

    fn call<'a>(&'a self, arguments: serde_json::Value) -> BoxFuture<'a, ToolOutput> {
        let workspace = self.workspace.clone();
        Box::pin(async move {
            let arguments: Arguments = match arguments::parse(arguments) {
                Ok(arguments) => arguments,
                Err(output) => return output,
            };
            blocking::run(move || list_dir(&workspace, &arguments))
                .await
                .unwrap_or_else(|| ToolOutput::Error("list_dir failed unexpectedly".into()))
        })
    }
}

fn list_dir(workspace: &Workspace, arguments: &Arguments) -> ToolOutput {
    let path = arguments.path.as_deref().unwrap_or(".");
    // Out-of-range depths are clamped rather than refused: the intent is clear.
    let depth = arguments.depth.unwrap_or(1).clamp(1, MAX_DEPTH) as usize;
    let mut listing = Listing::default();
    match workspace.locate(path) {
        Err(message) => return ToolOutput::Error(message),
        Ok(Location::WorkingRoot) => {
            for checkout in workspace.checkouts() {
                listing.push(format!("{}/", checkout.name));
                if depth > 1 {
                    let scope = Scope {
                        root: checkout.root.path().to_path_buf(),
                        target: checkout.root.path().to_path_buf(),
                    };
                    walk(workspace, checkout, &scope, depth - 1, &mut listing);
                }
            }
        }
        Ok(Location::Inside { checkout, resolved }) => {
            let shown = workspace.display_path(&resolved.repo, &resolved.relative);
            if !resolved.absolute.is_dir() {
                return ToolOutput::Error(format!(
                    "{shown} is a file, not a directory; use read_file to read it"
                ));
            }
            let scope = Scope {
                root: checkout.root.path().to_path_buf(),
                target: resolved.absolute.clone(),
            };
            walk(workspace, checkout, &scope, depth, &mut listing);
            if listing.total == 0 {
                return ToolOutput::Ok(format!("[no entries in {shown}]"));
            }
        }
    }
    ToolOutput::Ok(listing.render())
}

/// Appends the entries below `scope.target`, at most `depth` levels deep, in tree order.
fn walk(
    workspace: &Workspace,
    checkout: &Checkout,
    scope: &Scope,
    depth: usize,
    listing: &mut Listing,
) {
    let base = scope.target_depth();
    let mut builder = scope.builder(None);
    builder
        .max_depth(Some(base + depth))
        .sort_by_file_name(|a, b| a.cmp(b));
    let mut reached_target = false;
    for entry in builder.build().flatten() {
        if entry.path() == scope.target {
            reached_target = true;
        }
        push_entry(workspace, checkout, scope, &entry, listing);
    }
    if !reached_target {
        let mut builder = scope.fallback(None);
        builder
            .max_depth(Some(depth))
            .sort_by_file_name(|a, b| a.cmp(b));
        for entry in builder.build().flatten() {
            push_entry(workspace, checkout, scope, &entry, listing);
        }
    }
}

fn push_entry(
    workspace: &Workspace,
    checkout: &Checkout,
    scope: &Scope,
    entry: &ignore::DirEntry,
    listing: &mut Listing,
) {
    let path = entry.path();
    // The walk from the root also yields the target's ancestors and the target itself.
    if path == scope.target || !path.starts_with(&scope.target) {
        return;
    }
    let Some(relative) = checkout.relative_of(path) else {
        return;
    };
    let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
    listing.push(display(workspace, &checkout.name, relative, is_dir));
}

fn display(workspace: &Workspace, repo: &str, relative: &Path, is_dir: bool) -> String {
    let mut shown = workspace.display_path(repo, &slash_path(relative));
    if is_dir {
        shown.push('/');
    }
    shown
}

#[derive(Debug, Default)]
struct Listing {
    lines: String,
    total: usize,
}

impl Listing {
    fn push(&mut self, entry: String) {
        if self.total < MAX_ENTRIES {
            self.lines.push_str(&entry);
            self.lines.push('\n');
        }
        self.total += 1;
    }

    fn render(mut self) -> String {
        if self.total > MAX_ENTRIES {
            self.lines.push_str(&format!(
                "[... {} more entries not shown; list a subdirectory]",
                self.total - MAX_ENTRIES
            ));
        }
        self.lines.truncate(self.lines.trim_end_matches('\n').len());
        self.lines
    }
}
