//! The shape of the code, for the crates' architecture tests: a package's normal dependency
//! closure as `cargo metadata` resolves it, and the imports between a crate's modules (to find
//! import circles).
//!
//! The units are sibling modules at every level: `worker` and `journal` at the top,
//! `worker::change_task` and `worker::maintain_task` inside `worker`; a module and its own
//! submodules may refer to each other freely. A reference is a `crate::…`, `super::…` or
//! `self::…` path (in code or a `use` tree, groups expanded), or in a module's root file a
//! child's name, followed through re-exports (`crate::Stream` for `pub use spec::Stream`, and a
//! module's one glob re-export) to the module that defines it. Comments, string literals and a
//! file's `#[cfg(test)]` module are not imports.

// cargo metadata is run directly: these helpers check the build graph, not Warden behaviour.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Runs `cargo metadata` (resolved for the host, with `extra` arguments such as
/// `--no-default-features`) in `manifest_dir`.
pub fn metadata(manifest_dir: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "metadata".to_string(),
        "--format-version".into(),
        "1".into(),
        "--filter-platform".into(),
        host_triple(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(manifest_dir)
        .output()
        .unwrap_or_else(|e| panic!("cargo metadata does not run: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("cargo metadata printed no JSON: {e}"))
}

fn host_triple() -> String {
    let output = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .unwrap_or_else(|e| panic!("rustc does not run: {e}"));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("rustc -vV names no host"))
        .to_string()
}

/// The packages `package` names as normal (non-dev, non-build) dependencies in its manifest.
pub fn direct_normal_dependencies(metadata: &serde_json::Value, package: &str) -> BTreeSet<String> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == package)
        .flat_map(|p| p["dependencies"].as_array().into_iter().flatten())
        .filter(|d| d["kind"].is_null())
        .filter_map(|d| d["name"].as_str().map(str::to_string))
        .collect()
}

/// The names of the packages `package` links (itself included) as `cargo tree` resolves it
/// with `extra` flags (e.g. `--no-default-features`), normal dependencies only. Unlike the
/// `resolve` of `cargo metadata`, which unifies features across the whole workspace, this is
/// the graph a build of `package` alone has: an optional dependency another member enables
/// (`warden-protocol`'s `openapi`, for `warden-api`) is in it only if this package enables it.
pub fn built_closure(manifest_dir: &str, package: &str, extra: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args = vec![
        "tree", "--locked", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
        "--target", "all",
    ];
    args.extend_from_slice(extra);
    let output = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(manifest_dir)
        .output()
        .unwrap_or_else(|e| panic!("cargo tree does not run: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The packages of the workspace that depend on `package` (any kind of dependency).
pub fn dependents(metadata: &serde_json::Value, package: &str) -> BTreeSet<String> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str())
        .collect();
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .filter(|p| {
            p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| d["name"] == package)
        })
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect()
}

/// Every `.rs` file under `dir`, recursively, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a file under `src` (`worker/change_task.rs` → `["worker",
/// "change_task"]`, `tasks/mod.rs` → `["tasks"]`, `lib.rs` → `[]`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if !matches!(stem, "mod" | "lib" | "main") {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// `text` without its whole-line comments and its test module (`#[cfg(test)]` then `mod …`:
/// what a test sets up its fixtures with is not an import of the code).
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| {
            pair[0].trim() == "#[cfg(test)]" && pair[1].trim_start().starts_with("mod ")
        })
        .unwrap_or(lines.len());
    let text = lines[..end]
        .iter()
        .filter(|line| !line.trim_start().starts_with("//"))
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    without_strings(&text)
}

/// `text` with the contents of its string literals (plain and raw) left out, so that a path in
/// a message is not read as an import; `'"'` is a character, not a string.
fn without_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.extend(&chars[i..i + 3]);
            i += 3;
            continue;
        }
        if c == '\'' && chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') {
            out.extend(&chars[i..i + 4]);
            i += 4;
            continue;
        }
        let raw = c == 'r'
            && (i == 0 || !is_ident(chars[i - 1]))
            && matches!(chars.get(i + 1), Some('"' | '#'));
        if raw {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let mut j = i + 2 + hashes;
                while j < chars.len()
                    && !(chars[j] == '"'
                        && chars[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|c| **c == '#')
                            .count()
                            == hashes)
                {
                    j += 1;
                }
                out.push_str("\"\"");
                i = (j + 1 + hashes).min(chars.len());
                continue;
            }
        }
        if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifiers that follow `prefix` in `text` where `prefix` starts a path (not inside a
/// longer identifier), with the text before the prefix's match (for `super::super::`).
fn following_idents<'a>(text: &'a str, prefix: &str) -> Vec<(usize, &'a str)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        if text[..at].ends_with(is_ident) {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end > 0 {
            found.push((at, &rest[..end]));
        }
    }
    found
}

/// One edge of the import graph: `from` refers to `to` in `file` with `reference`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: String,
    pub reference: String,
}

/// The import circles among `edges`: each strongly connected set of two or more modules, with
/// the edges inside it.
pub fn circles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for edge in edges {
        graph
            .entry(edge.from.as_str())
            .or_default()
            .insert(edge.to.as_str());
        graph.entry(edge.to.as_str()).or_default();
    }
    // Two modules are in one circle when each reaches the other.
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for next in graph.get(node).into_iter().flatten() {
                if seen.insert(next.to_string()) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> =
        graph.keys().map(|node| (*node, reach(node))).collect();
    let mut circles = Vec::new();
    let mut placed = BTreeSet::new();
    for node in graph.keys() {
        if placed.contains(node) {
            continue;
        }
        let members: BTreeSet<&str> = graph
            .keys()
            .copied()
            .filter(|other| {
                other == node || (reaches[node].contains(*other) && reaches[other].contains(*node))
            })
            .collect();
        if members.len() < 2 {
            continue;
        }
        placed.extend(members.iter().copied());
        circles.push(
            edges
                .iter()
                .filter(|e| members.contains(e.from.as_str()) && members.contains(e.to.as_str()))
                .cloned()
                .collect(),
        );
    }
    circles
}

/// The module tree of a crate: every module path (`[]` the root) with the file that holds it,
/// and what each module's root file re-exports.
struct Tree {
    /// Module path → its file, relative to `src`.
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// Module path → re-exported name → the path it names (absolute, resolved from the module).
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    /// Module path → the paths it re-exports everything of (`pub use child::*`).
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

/// The `::`-separated identifiers of a path starting `text` (`a::b::{c}` gives `a`, `b`).
fn path_idents(text: &str) -> Vec<String> {
    let mut idents = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        idents.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(next) if next.starts_with(is_ident) => rest = next,
            _ => break,
        }
    }
    idents
}

/// `path` as written in module `at` (`crate::x`, `super::x`, `self::x`, or in `at`'s root file
/// a child's name) made absolute; `None` for another crate's path.
fn absolute(at: &[String], written: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let first = written.first()?;
    match first.as_str() {
        "crate" => Some(written[1..].to_vec()),
        "self" => Some(at.iter().chain(&written[1..]).cloned().collect()),
        "super" => {
            let ups = written.iter().take_while(|w| *w == "super").count();
            let base = at.len().checked_sub(ups)?;
            Some(at[..base].iter().chain(&written[ups..]).cloned().collect())
        }
        name if children.contains(name) => Some(at.iter().chain(written).cloned().collect()),
        _ => None,
    }
}

impl Tree {
    fn read(src: &Path) -> Tree {
        let mut modules = BTreeMap::new();
        for file in rust_files(src) {
            let relative = file.strip_prefix(src).unwrap_or(&file).to_path_buf();
            modules.insert(module_path(&relative), relative);
        }
        let mut tree = Tree {
            modules,
            reexports: BTreeMap::new(),
            globs: BTreeMap::new(),
        };
        let roots: Vec<(Vec<String>, PathBuf)> = tree
            .modules
            .iter()
            .map(|(path, file)| (path.clone(), file.clone()))
            .collect();
        for (path, file) in roots {
            let text = code(&std::fs::read_to_string(src.join(&file)).unwrap_or_default());
            let children = tree.children(&path);
            for statement in text.split(';') {
                let statement = statement.trim();
                let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                    .iter()
                    .find_map(|prefix| statement.strip_prefix(prefix))
                else {
                    continue;
                };
                for (written, name) in use_leaves(rest) {
                    let Some(target) = absolute(&path, &written, &children) else {
                        continue;
                    };
                    match name {
                        Some(name) => {
                            tree.reexports
                                .entry(path.clone())
                                .or_default()
                                .insert(name, target);
                        }
                        None => tree.globs.entry(path.clone()).or_default().push(target),
                    }
                }
            }
        }
        tree
    }

    /// The names of `module`'s submodules.
    fn children(&self, module: &[String]) -> BTreeSet<String> {
        self.modules
            .keys()
            .filter(|path| path.len() == module.len() + 1 && path.starts_with(module))
            .map(|path| path[module.len()].clone())
            .collect()
    }

    /// The module an absolute path lands in: its longest module prefix, followed through
    /// re-exports (named, or one glob) of the item after it.
    fn resolve(&self, path: &[String], depth: usize) -> Vec<String> {
        let mut module: Vec<String> = Vec::new();
        for (index, ident) in path.iter().enumerate() {
            let mut next = module.clone();
            next.push(ident.clone());
            if self.modules.contains_key(&next) {
                module = next;
                continue;
            }
            if depth < 8 {
                if let Some(target) = self.reexports.get(&module).and_then(|r| r.get(ident)) {
                    let mut followed = target.clone();
                    followed.extend(path[index + 1..].iter().cloned());
                    return self.resolve(&followed, depth + 1);
                }
                if let Some([only]) = self.globs.get(&module).map(Vec::as_slice) {
                    let mut followed = only.clone();
                    followed.extend(path[index..].iter().cloned());
                    return self.resolve(&followed, depth + 1);
                }
            }
            break;
        }
        module
    }
}

/// The leaves of a `use` tree (`a::{b, c::D as E, f::*}`): each path as written and the name it
/// brings (`None` for a glob).
fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut leaves = Vec::new();
    // Only a use tree: identifiers, `::`, groups, globs and `as` (a sentence in a string that
    // happens to follow a `;` with "use " is not one).
    let is_tree = tree
        .chars()
        .all(|c| is_ident(c) || matches!(c, ':' | '{' | '}' | ',' | '*' | ' '))
        && tree.matches('{').count() == tree.matches('}').count();
    if !is_tree {
        return leaves;
    }
    fn walk(prefix: &[String], text: &str, leaves: &mut Vec<(Vec<String>, Option<String>)>) {
        let text = text.trim();
        if let Some(open) = text.find('{') {
            let head = text[..open].trim_end_matches("::").trim();
            let mut base = prefix.to_vec();
            base.extend(
                head.split("::")
                    .filter(|p| !p.is_empty())
                    .map(|p| p.trim().to_string()),
            );
            let inner = &text[open + 1..text.rfind('}').unwrap_or(text.len())];
            let mut depth = 0;
            let mut item = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&base, &std::mem::take(&mut item), leaves);
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            if !item.trim().is_empty() {
                walk(&base, &item, leaves);
            }
            return;
        }
        let (path, alias) = match text.split_once(" as ") {
            Some((path, alias)) => (path.trim(), Some(alias.trim().to_string())),
            None => (text, None),
        };
        let mut parts: Vec<String> = prefix.to_vec();
        parts.extend(path.split("::").map(|p| p.trim().to_string()));
        match parts.last().map(String::as_str) {
            Some("*") => {
                parts.pop();
                leaves.push((parts, None));
            }
            Some("self") => {
                parts.pop();
                let name = alias.or_else(|| parts.last().cloned());
                leaves.push((parts, name));
            }
            Some(last) if !last.is_empty() => {
                let name = alias.unwrap_or_else(|| last.to_string());
                leaves.push((parts, Some(name)));
            }
            _ => {}
        }
    }
    walk(&[], &tree, &mut leaves);
    leaves
}

/// Every path a file's code writes that may name a module of its crate: `crate::…`,
/// `super::…`, `self::…` (with `use` groups expanded) and, in a module's root file, its
/// children's names.
fn written_paths(text: &str, children: &BTreeSet<String>) -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    for statement in text.split(';') {
        let trimmed = statement.trim_start();
        let rest = trimmed
            .strip_prefix("pub ")
            .or_else(|| trimmed.strip_prefix("pub(crate) "))
            .or_else(|| trimmed.strip_prefix("pub(super) "))
            .unwrap_or(trimmed);
        if let Some(tree) = rest.strip_prefix("use ") {
            for (written, _) in use_leaves(tree) {
                let shown = written.join("::");
                found.push((written, shown));
            }
        }
    }
    for prefix in ["crate::", "super::", "self::"] {
        for (at, _) in following_idents(text, prefix) {
            if text[..at].ends_with("::") {
                continue;
            }
            let written = path_idents(&text[at..]);
            let shown = written.join("::");
            found.push((written, shown));
        }
    }
    for child in children {
        for (at, _) in following_idents(text, &format!("{child}::")) {
            if text[..at].ends_with("::") || text[..at].ends_with('.') {
                continue;
            }
            let written = path_idents(&text[at..]);
            let shown = written.join("::");
            found.push((written, shown));
        }
    }
    found
}

/// The references between sibling modules anywhere in the crate under `src`: `worker` →
/// `journal` at the top, `worker::change_task` → `worker::maintain_task` inside `worker`. A
/// module and its own submodules may refer to each other freely; a path through a re-export
/// (`crate::CommandOutput` for `pub use output::CommandOutput`) counts as a reference to where
/// it comes from. The top-level unit of the crate root is `crate`.
pub fn unit_edges(src: &Path) -> Vec<Edge> {
    let tree = Tree::read(src);
    let mut edges = BTreeSet::new();
    for (path, file) in &tree.modules {
        let text = code(&std::fs::read_to_string(src.join(file)).unwrap_or_default());
        let children = tree.children(path);
        for (written, shown) in written_paths(&text, &children) {
            let Some(target) = absolute(path, &written, &children) else {
                continue;
            };
            let to = tree.resolve(&target, 0);
            let common = path.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == path.len() || common == to.len() {
                // A module and its own submodules, or itself.
                if !(path.is_empty() && to.len() == 1 && common == 0) {
                    continue;
                }
            }
            let unit = |p: &[String]| {
                if p.is_empty() {
                    "crate".to_string()
                } else {
                    p[..=common.min(p.len() - 1)].join("::")
                }
            };
            let (from, to) = (unit(path), unit(&to));
            if from == to || from == "crate" || to == "crate" {
                continue;
            }
            edges.insert(Edge {
                from,
                to,
                file: file.display().to_string(),
                reference: shown,
            });
        }
    }
    // One edge per pair of units (the first reference found), as [`module_edges`] gives.
    let mut seen = BTreeSet::new();
    edges
        .into_iter()
        .filter(|e| seen.insert((e.from.clone(), e.to.clone())))
        .collect()
}

/// Panics with the circles when sibling modules anywhere under `src` import each other in a
/// circle ([`unit_edges`]); returns the edges otherwise (for further checks).
pub fn assert_no_import_circles(src: &Path) -> Vec<Edge> {
    let edges = unit_edges(src);
    let circles = circles(&edges);
    if !circles.is_empty() {
        let text: Vec<String> = circles
            .iter()
            .map(|circle| {
                circle
                    .iter()
                    .map(|e| format!("  {} -> {} ({}: {})", e.from, e.to, e.file, e.reference))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        panic!(
            "modules under {} import each other in a circle:\n{}",
            src.display(),
            text.join("\n\n")
        );
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12's rule for every crate of the workspace, not only the three that hold the
    /// service: no two top-level modules of a crate import each other, directly or around.
    #[test]
    fn no_crate_of_the_workspace_has_an_import_circle() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&crates).unwrap().flatten() {
            let src = entry.path().join("src");
            if !src.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let found = circles(&unit_edges(&src));
            for circle in found {
                let modules: BTreeSet<&str> = circle.iter().map(|e| e.from.as_str()).collect();
                let edges: Vec<String> = circle
                    .iter()
                    .map(|e| format!("{} -> {} ({}: {})", e.from, e.to, e.file, e.reference))
                    .collect();
                offenders.push(format!(
                    "{name}: {}\n    {}",
                    modules.into_iter().collect::<Vec<_>>().join(" <-> "),
                    edges.join("\n    ")
                ));
            }
        }
        offenders.sort();
        assert!(
            offenders.is_empty(),
            "import circles:\n{}",
            offenders.join("\n")
        );
    }

    /// A crate under a temporary `src/` with `files` (path, text).
    fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join("src").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    /// `from -> to (reference)` of each edge of the planted crate.
    fn edges_of(files: &[(&str, &str)]) -> Vec<String> {
        let dir = planted(files);
        unit_edges(&dir.path().join("src"))
            .into_iter()
            .map(|e| format!("{} -> {} ({})", e.from, e.to, e.reference))
            .collect()
    }

    #[test]
    fn references_are_found_in_paths_use_groups_super_and_the_root() {
        let edges = edges_of(&[
            (
                "lib.rs",
                "mod api; mod hub; mod worker;\npub use api::router;\n",
            ),
            ("api.rs", "pub fn router() {}\n"),
            ("hub.rs", "fn f() { crate::api::router() }\n"),
            (
                "worker.rs",
                "use crate::{hub, api::{self}};\nuse super::hub as h;\n",
            ),
        ]);
        assert_eq!(
            edges,
            [
                "hub -> api (crate::api::router)",
                "worker -> api (crate::api)",
                "worker -> hub (crate::hub)",
            ]
        );
        // Another crate's `api`, a longer name, a comment, a string and a test module are not
        // references.
        let edges = edges_of(&[
            ("lib.rs", "mod api; mod hub; mod apis;\n"),
            ("api.rs", ""),
            ("apis.rs", ""),
            (
                "hub.rs",
                "use mycrate::api;\nuse crate::apis;\n/// [`crate::api::x`]\n// crate::api\n\
                 const S: &str = \"; use crate::api;\";\n\
                 #[cfg(test)]\nmod tests {\n    use crate::api;\n}\n",
            ),
        ]);
        assert_eq!(edges, ["hub -> apis (crate::apis)"]);
    }

    /// A circle through a crate root's re-export (`crate::Stream` for `pub use spec::Stream`)
    /// is found, as is one through a glob re-export.
    #[test]
    fn a_circle_through_a_re_export_is_found() {
        let dir = planted(&[
            (
                "lib.rs",
                "mod error; mod spec;\npub use spec::{Stream, View as Shown};\npub use error::*;\n",
            ),
            (
                "spec.rs",
                "pub enum Stream {}\npub struct View;\nfn f() -> crate::SandboxError { todo!() }\n",
            ),
            ("error.rs", "use crate::Shown;\npub struct SandboxError;\n"),
        ]);
        let found = circles(&unit_edges(&dir.path().join("src")));
        assert_eq!(found.len(), 1, "{found:?}");
        let units: BTreeSet<&str> = found[0].iter().map(|e| e.from.as_str()).collect();
        assert_eq!(units.into_iter().collect::<Vec<_>>(), ["error", "spec"]);
        let result = std::panic::catch_unwind(|| assert_no_import_circles(&dir.path().join("src")));
        assert!(result.is_err(), "the planted circle passed");
    }

    /// Files of one module that import each other are a circle; a module and its own
    /// submodules may refer to each other freely.
    #[test]
    fn a_circle_between_files_of_a_module_is_found_and_parents_are_free() {
        let dir = planted(&[
            ("lib.rs", "mod worker;\n"),
            (
                "worker/mod.rs",
                "mod change; mod maintain;\nuse change::run;\n",
            ),
            (
                "worker/change.rs",
                "use super::maintain::Input;\npub fn run() {}\n",
            ),
            (
                "worker/maintain.rs",
                "pub struct Input;\nfn f() { super::change::run() }\nuse crate::worker::x;\n",
            ),
        ]);
        let edges = unit_edges(&dir.path().join("src"));
        let shown: Vec<String> = edges
            .iter()
            .map(|e| format!("{} -> {}", e.from, e.to))
            .collect();
        assert_eq!(
            shown,
            [
                "worker::change -> worker::maintain",
                "worker::maintain -> worker::change"
            ]
        );
        assert_eq!(circles(&edges).len(), 1);
    }

    #[test]
    fn circles_are_found_with_their_edges() {
        let edge = |from: &str, to: &str| Edge {
            from: from.into(),
            to: to.into(),
            file: format!("{from}.rs"),
            reference: format!("crate::{to}"),
        };
        let edges = vec![
            edge("a", "b"),
            edge("b", "c"),
            edge("c", "a"),
            edge("c", "d"),
            edge("d", "e"),
        ];
        let found = circles(&edges);
        assert_eq!(
            found,
            vec![vec![edge("a", "b"), edge("b", "c"), edge("c", "a")]]
        );
        assert!(circles(&[edge("a", "b"), edge("b", "c")]).is_empty());
    }
}
