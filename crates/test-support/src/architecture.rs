//! The shape of the code, for the crates' architecture tests: a package's normal dependency
//! closure as `cargo metadata` resolves it, and the imports between the top-level modules of a
//! crate's `src/` (to find import circles).
//!
//! A top-level module is a unit: `src/x.rs` together with everything under `src/x/`, which may
//! refer to each other freely (a module and its private submodules). Between units, a reference
//! is a `crate::x` path, a `crate::{x, …}` group item, or a `super::x` that resolves to
//! another unit; in `lib.rs`/`main.rs` (the unit `crate`) any `x::` path too. Whole-line
//! comments are skipped: a doc link is not an import.

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

/// The names of the packages `package` depends on through normal (non-dev, non-build)
/// dependencies, transitively, itself included, in the resolve of `metadata`.
pub fn normal_closure(metadata: &serde_json::Value, package: &str) -> BTreeSet<String> {
    let packages: BTreeMap<&str, &serde_json::Value> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root = packages
        .iter()
        .find(|(_, p)| p["name"] == package)
        .map(|(id, _)| *id)
        .unwrap_or_else(|| panic!("no package {package} in the metadata"));
    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            if normal {
                stack.extend(dep["pkg"].as_str());
            }
        }
    }
    seen.iter()
        .filter_map(|id| packages[id]["name"].as_str().map(str::to_string))
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

/// `text` without its whole-line comments.
fn code(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level items of every `<prefix>{ ... }` group in `text` (`use crate::{api, hub};`
/// gives `api` and `hub`), nested groups kept whole.
pub fn grouped_items(text: &str, prefix: &str) -> Vec<String> {
    let mut items = Vec::new();
    for (start, _) in text.match_indices(prefix) {
        let mut depth = 0;
        let mut item = String::new();
        for c in text[start + prefix.len()..].chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item).trim().to_string());
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item.trim().to_string());
    }
    items
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

/// The other top-level modules a file refers to, each with the reference as written. `path` is
/// the file's module path; `modules` the crate's top-level modules.
pub fn references(
    text: &str,
    path: &[String],
    modules: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let text = code(text);
    let own = path.first().map(String::as_str).unwrap_or("crate");
    let mut found = BTreeMap::new();
    let mut add = |target: &str, reference: String| {
        if modules.contains(target) && target != own {
            found.entry(target.to_string()).or_insert(reference);
        }
    };
    for (_, name) in following_idents(&text, "crate::") {
        add(name, format!("crate::{name}"));
    }
    for item in grouped_items(&text, "crate::{") {
        let name = item
            .split(|c: char| !is_ident(c))
            .next()
            .unwrap_or_default();
        add(name, format!("crate::{{{item}}}"));
    }
    // `super::` (repeated) climbs from the file's module; only a path that lands at the root
    // names another unit.
    for (at, _) in following_idents(&text, "super::") {
        if text[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &text[at..];
        let mut depth = 0;
        while let Some(next) = rest.strip_prefix("super::") {
            depth += 1;
            rest = next;
        }
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if depth == path.len() {
            add(
                &rest[..end],
                format!("{}{}", "super::".repeat(depth), &rest[..end]),
            );
        }
    }
    if path.is_empty() {
        // The crate root names its modules without `crate::`.
        for module in modules {
            let prefix = format!("{module}::");
            if !following_idents(&text, &prefix).is_empty()
                || text.contains(&format!("{prefix}{{"))
                || text.contains(&format!("{prefix}*"))
            {
                add(module, prefix);
            }
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

/// The references between the top-level modules of the crate whose sources are `src` (the
/// crate root is the unit `crate`).
pub fn module_edges(src: &Path) -> Vec<Edge> {
    let files = rust_files(src);
    let relative: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(src).unwrap_or(f).to_path_buf())
        .collect();
    let modules: BTreeSet<String> = relative
        .iter()
        .filter_map(|r| module_path(r).into_iter().next())
        .collect();
    let mut edges = Vec::new();
    for (file, relative) in files.iter().zip(&relative) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let path = module_path(relative);
        let from = path.first().cloned().unwrap_or_else(|| "crate".into());
        for (to, reference) in references(&text, &path, &modules) {
            edges.push(Edge {
                from: from.clone(),
                to,
                file: relative.display().to_string(),
                reference,
            });
        }
    }
    edges.sort();
    edges
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

/// Panics with the circles when the top-level modules under `src` import each other in a
/// circle; returns the edges otherwise (for further checks).
pub fn assert_no_import_circles(src: &Path) -> Vec<Edge> {
    let edges = module_edges(src);
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
            let found = circles(&module_edges(&src));
            for circle in found {
                let modules: BTreeSet<&str> = circle.iter().map(|e| e.from.as_str()).collect();
                offenders.push(format!(
                    "{}: {}",
                    entry.file_name().to_string_lossy(),
                    modules.into_iter().collect::<Vec<_>>().join(" <-> ")
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

    fn modules() -> BTreeSet<String> {
        ["api", "hub", "worker", "config"]
            .into_iter()
            .map(String::from)
            .collect()
    }

    fn refs(text: &str, path: &[&str]) -> Vec<String> {
        let path: Vec<String> = path.iter().map(|p| p.to_string()).collect();
        references(text, &path, &modules()).into_values().collect()
    }

    #[test]
    fn references_are_found_in_paths_and_use_groups() {
        assert_eq!(refs("x(crate::api::rfc3339(1))", &["hub"]), ["crate::api"]);
        assert_eq!(refs("use super::api::Tokens;", &["hub"]), ["super::api"]);
        assert_eq!(
            refs("use crate::{api::{self, Tokens}, hub};", &["worker"]),
            ["crate::{api::{self, Tokens}}", "crate::{hub}"]
        );
        assert_eq!(refs("use crate::{hub, api};", &["hub"]), ["crate::{api}"]);
        assert!(refs("use crate::apis; github::web_host_of_api(x)", &["hub"]).is_empty());
        assert!(refs("use crate::{hub::{api_like}, rapid};", &["hub"]).is_empty());
        assert!(refs("use mycrate::api;", &["hub"]).is_empty());
    }

    #[test]
    fn a_unit_may_refer_to_itself_and_comments_are_not_imports() {
        assert!(refs("use crate::hub::Ring; use super::Ring;", &["hub", "ring"]).is_empty());
        assert!(refs("/// See [`crate::api::router`].\nfn f() {}", &["hub"]).is_empty());
        assert!(refs("    // crate::api::x\n", &["hub"]).is_empty());
        // `super::` from a submodule stays in its unit; twice climbs to the root.
        assert!(refs("use super::api;", &["worker", "change"]).is_empty());
        assert_eq!(
            refs("use super::super::api;", &["worker", "change"]),
            ["super::super::api"]
        );
    }

    #[test]
    fn the_root_names_modules_without_crate() {
        assert_eq!(refs("pub mod api;\npub use api::router;", &[]), ["api::"]);
        assert!(refs("pub mod api;\npub mod hub;", &[]).is_empty());
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
