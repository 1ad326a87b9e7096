//! The HTTP API (`src/api/`) sits on top of the rest of the crate, never underneath it: no file
//! outside `src/api/` refers to `crate::api`, so the non-API modules (workers, hub, callbacks,
//! publication, the service configuration) form no import circle with the routes. The one
//! exception is `src/serve.rs`, the composition root that mounts the router; nothing in the
//! crate refers to it, so it closes no circle either.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
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

/// The top-level items of every `<prefix>{ ... }` group in `text` (`use crate::{api, hub};`
/// gives `api` and `hub`), nested groups kept whole.
fn grouped_items(text: &str, prefix: &str) -> Vec<String> {
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

/// The references to the module `name` of the crate root in `text`, as found.
fn references_to(text: &str, name: &str) -> Vec<String> {
    let mut found: Vec<String> = [format!("crate::{name}"), format!("super::{name}")]
        .into_iter()
        .filter(|path| {
            text.match_indices(path.as_str()).any(|(at, _)| {
                !text[at + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        })
        .collect();
    found.extend(
        grouped_items(text, "crate::{")
            .into_iter()
            .filter(|item| {
                item == name
                    || item.starts_with(&format!("{name}::"))
                    || item.starts_with(&format!("{name} "))
            })
            .map(|item| format!("crate::{{{item}}}")),
    );
    found
}

#[test]
fn only_the_api_and_the_composition_root_refer_to_the_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    assert!(files.len() > 20, "found only {files:?} under {src:?}");
    let mut offenders = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        if relative.starts_with("api") || relative == Path::new("serve.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for reference in references_to(&text, "api") {
            offenders.push(format!("{}: {reference}", relative.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "modules outside src/api/ depend on the API (move the shared item out of api/):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn nothing_in_the_crate_refers_to_the_composition_root() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap().to_path_buf();
        if relative == Path::new("serve.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for reference in references_to(&text, "serve") {
            offenders.push(format!("{}: {reference}", relative.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "serve.rs is the composition root; nothing may depend on it:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn references_are_found_in_paths_and_use_groups() {
    assert_eq!(
        references_to("x(crate::api::rfc3339(1))", "api"),
        ["crate::api"]
    );
    assert_eq!(
        references_to("use super::api::Tokens;", "api"),
        ["super::api"]
    );
    assert_eq!(
        references_to("use crate::{api::{self, Tokens}, hub};", "api"),
        ["crate::{api::{self, Tokens}}"]
    );
    assert_eq!(
        references_to("use crate::{hub, api};", "api"),
        ["crate::{api}"]
    );
    assert!(references_to("use crate::apis; github::web_host_of_api(x)", "api").is_empty());
    assert!(references_to("use crate::{hub::{api_like}, rapid};", "api").is_empty());
}
