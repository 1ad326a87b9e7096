//! list_dir: sorting, depth, ignore files, .git, the entry cap, symlinks and multi-repo roots.

use super::*;
use serde_json::json;
use std::os::unix::fs::symlink;

fn list(workspace: &Arc<Workspace>, arguments: serde_json::Value) -> ToolOutput {
    call(workspace, "list_dir", arguments)
}

fn fixture() -> tempfile::TempDir {
    tree(&[
        ("Cargo.toml", ""),
        ("README.md", ""),
        (".gitignore", "target/\n*.log\n/src/generated/\n"),
        (".ignore", "scratch/\n"),
        (".github/workflows/ci.yml", ""),
        (".git/config", "[core]\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        ("target/debug/app", ""),
        ("scratch/notes.txt", ""),
        ("build.log", ""),
        ("src/lib.rs", ""),
        ("src/b.rs", ""),
        ("src/b/inner.rs", ""),
        ("src/b0.rs", ""),
        ("src/generated/out.rs", ""),
        ("src/debug.log", ""),
        ("docs/guide/intro/deep/deeper/x.md", ""),
    ])
}

#[test]
fn lists_the_root_sorted_with_ignores_applied() {
    let dir = fixture();
    let ws = single(dir.path());
    let expected = ".github/\n.gitignore\n.ignore\nCargo.toml\nREADME.md\ndocs/\nsrc/";
    assert_eq!(ok(list(&ws, json!({}))), expected);
    assert_eq!(ok(list(&ws, json!({"path": "."}))), expected);
    assert_eq!(ok(list(&ws, json!({"path": ""}))), expected);
}

#[test]
fn lists_deeper_in_tree_order() {
    let dir = fixture();
    let ws = single(dir.path());
    assert_eq!(
        ok(list(&ws, json!({"path": "src", "depth": 2}))),
        "src/b/\nsrc/b/inner.rs\nsrc/b.rs\nsrc/b0.rs\nsrc/lib.rs"
    );
    assert_eq!(
        ok(list(&ws, json!({"path": "docs", "depth": 4}))),
        "docs/guide/\ndocs/guide/intro/\ndocs/guide/intro/deep/\ndocs/guide/intro/deep/deeper/"
    );
    // Depth is clamped to 1..=4.
    assert_eq!(
        ok(list(&ws, json!({"path": "docs", "depth": 9}))),
        ok(list(&ws, json!({"path": "docs", "depth": 4})))
    );
    assert_eq!(
        ok(list(&ws, json!({"path": "docs", "depth": 0}))),
        "docs/guide/"
    );
}

#[test]
fn ignore_files_above_the_target_still_apply() {
    let dir = fixture();
    let ws = single(dir.path());
    // `/src/generated/` and `*.log` come from the root .gitignore.
    assert_eq!(
        ok(list(&ws, json!({"path": "src"}))),
        "src/b/\nsrc/b.rs\nsrc/b0.rs\nsrc/lib.rs"
    );
}

#[test]
fn an_ignored_directory_named_explicitly_is_listed() {
    let dir = fixture();
    let ws = single(dir.path());
    assert_eq!(
        ok(list(&ws, json!({"path": "target", "depth": 2}))),
        "target/debug/\ntarget/debug/app"
    );
    assert_eq!(
        ok(list(&ws, json!({"path": "src/generated"}))),
        "src/generated/out.rs"
    );
}

#[test]
fn ignore_files_above_the_snapshot_do_not_apply() {
    let host = tempfile::tempdir().unwrap();
    write_tree(
        host.path(),
        &[(".gitignore", "*\n"), (".ignore", "*\n"), ("snap/a.rs", "")],
    );
    let ws = single(&host.path().join("snap"));
    assert_eq!(ok(list(&ws, json!({}))), "a.rs");
}

#[test]
fn git_is_never_listed_or_entered() {
    let dir = fixture();
    let ws = single(dir.path());
    assert_eq!(
        error(list(&ws, json!({"path": ".git"}))),
        r#"path ".git" is inside .git, which is not part of the checkout"#
    );
    let deep = ok(list(&ws, json!({"depth": 4})));
    assert!(!deep.contains(".git/"), "{deep}");
    assert!(deep.contains(".github/workflows/ci.yml"), "{deep}");
}

#[test]
fn caps_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..600 {
        write(dir.path(), &format!("many/f{n:03}"), b"");
    }
    let ws = single(dir.path());
    let out = ok(list(&ws, json!({"path": "many"})));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[0], "many/f000");
    assert_eq!(lines[499], "many/f499");
    assert_eq!(
        lines[500],
        "[... 100 more entries not shown; list a subdirectory]"
    );
}

#[test]
fn files_empty_directories_and_missing_paths() {
    let dir = tree(&[("a.rs", "")]);
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let ws = single(dir.path());
    assert_eq!(
        error(list(&ws, json!({"path": "a.rs"}))),
        "a.rs is a file, not a directory; use read_file to read it"
    );
    assert_eq!(
        ok(list(&ws, json!({"path": "empty"}))),
        "[no entries in empty]"
    );
    assert_eq!(
        error(list(&ws, json!({"path": "nope"}))),
        r#"path "nope" does not exist; use list_dir or search to find files"#
    );
    assert_eq!(
        error(list(&ws, json!({"path": "../"}))),
        r#"path "../" leaves the working root"#
    );
}

#[test]
fn symlinks_are_listed_but_not_followed() {
    let outside = tree(&[("secret/key.txt", "")]);
    let dir = tree(&[("src/a.rs", "")]);
    symlink(outside.path().join("secret"), dir.path().join("src/out")).unwrap();
    symlink(dir.path().join("src"), dir.path().join("src_link")).unwrap();
    let ws = single(dir.path());
    assert_eq!(
        ok(list(&ws, json!({"depth": 3}))),
        "src/\nsrc/a.rs\nsrc/out\nsrc_link"
    );
    assert_eq!(
        error(list(&ws, json!({"path": "src/out"}))),
        r#"path "src/out" resolves outside the repository through a symlink"#
    );
    // A symlinked directory inside the checkout resolves to the real one.
    assert_eq!(
        ok(list(&ws, json!({"path": "src_link"}))),
        "src/a.rs\nsrc/out"
    );
}

#[test]
fn multi_repository_root() {
    let app = tree(&[("src/main.rs", ""), ("Cargo.toml", "")]);
    let lib = tree(&[("lib.rs", ""), (".gitignore", "gen/\n"), ("gen/x.rs", "")]);
    let ws = multi(&[("lib", lib.path()), ("app", app.path())]);
    assert_eq!(ok(list(&ws, json!({}))), "app/\nlib/");
    assert_eq!(
        ok(list(&ws, json!({"path": ".", "depth": 2}))),
        "app/\napp/Cargo.toml\napp/src/\nlib/\nlib/.gitignore\nlib/lib.rs"
    );
    assert_eq!(ok(list(&ws, json!({"path": "app/src"}))), "app/src/main.rs");
    assert_eq!(
        ok(list(&ws, json!({"path": "lib"}))),
        "lib/.gitignore\nlib/lib.rs"
    );
}

#[test]
fn describes_calls() {
    let dir = tree(&[("a", "")]);
    let ws = single(dir.path());
    let tools = question_tools(ws);
    let list = tools.iter().find(|t| t.spec().name == "list_dir").unwrap();
    assert_eq!(list.describe(&json!({"path": "src"})), "list_dir src");
    assert_eq!(list.describe(&json!({})), "list_dir .");
    assert_eq!(
        list.describe(&json!({"path": "src", "depth": 2})),
        "list_dir src (depth 2)"
    );
}
