//! read_file: numbering, paging at 400 lines and 64 KiB, truncation, huge and binary files,
//! and hostile paths.

use super::*;
use serde_json::json;
use std::os::unix::fs::symlink;

fn read(workspace: &Arc<Workspace>, arguments: serde_json::Value) -> ToolOutput {
    call(workspace, "read_file", arguments)
}

fn lines(count: u64, text: impl Fn(u64) -> String) -> String {
    (1..=count).map(|n| text(n) + "\n").collect()
}

#[test]
fn numbers_every_line() {
    let dir = tree(&[("src/lib.rs", "fn a() {}\n\n    indented\n")]);
    let ws = single(dir.path());
    assert_eq!(
        ok(read(&ws, json!({"path": "src/lib.rs"}))),
        "src/lib.rs (lines 1-3 of 3)\n     1\tfn a() {}\n     2\t\n     3\t    indented"
    );
}

#[test]
fn reads_a_range_and_says_what_remains() {
    let dir = tree(&[("a.txt", &lines(20, |n| format!("line {n}")))]);
    let ws = single(dir.path());
    assert_eq!(
        ok(read(
            &ws,
            json!({"path": "a.txt", "start_line": 5, "end_line": 7})
        )),
        "a.txt (lines 5-7 of 20)\n     5\tline 5\n     6\tline 6\n     7\tline 7"
    );
    // end_line past the end is clamped, not refused.
    assert_eq!(
        ok(read(
            &ws,
            json!({"path": "a.txt", "start_line": 19, "end_line": 500})
        )),
        "a.txt (lines 19-20 of 20)\n    19\tline 19\n    20\tline 20"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "./a.txt", "start_line": 20}))),
        "a.txt (lines 20-20 of 20)\n    20\tline 20"
    );
}

#[test]
fn pages_at_400_lines() {
    let dir = tree(&[("big.txt", &lines(1000, |n| format!("l{n}")))]);
    let ws = single(dir.path());
    let expected = format!(
        "big.txt (lines 1-400 of 1000)\n{}\n[... 600 more lines; call read_file with start_line=401]",
        numbered(1, 400, |n| format!("l{n}"))
    );
    assert_eq!(ok(read(&ws, json!({"path": "big.txt"}))), expected);
    // The remainder counts only the requested range.
    let out = ok(read(
        &ws,
        json!({"path": "big.txt", "start_line": 401, "end_line": 900}),
    ));
    assert!(
        out.starts_with("big.txt (lines 401-800 of 1000)\n   401\tl401\n"),
        "{out}"
    );
    assert!(
        out.ends_with("\n   800\tl800\n[... 100 more lines; call read_file with start_line=801]")
    );
    let last = ok(read(&ws, json!({"path": "big.txt", "start_line": 801})));
    assert!(last.starts_with("big.txt (lines 801-1000 of 1000)\n"));
    assert!(last.ends_with("  1000\tl1000"));
}

#[test]
fn pages_at_64_kib() {
    // 1,000-character lines: each numbered line is 1,008 bytes, so 65 fit in 64 KiB.
    let dir = tree(&[("wide.txt", &lines(100, |n| format!("{n:0>1000}")))]);
    let ws = single(dir.path());
    let out = ok(read(&ws, json!({"path": "wide.txt"})));
    let expected = format!(
        "wide.txt (lines 1-65 of 100)\n{}\n[... 35 more lines; call read_file with start_line=66]",
        numbered(1, 65, |n| format!("{n:0>1000}"))
    );
    assert_eq!(out, expected);
    assert!(out.len() < 64 * 1024 + 200);
}

#[test]
fn truncates_long_lines() {
    let long = "é".repeat(5000);
    let dir = tree(&[("min.js", &format!("{long}\nshort\n"))]);
    let ws = single(dir.path());
    assert_eq!(
        ok(read(&ws, json!({"path": "min.js"}))),
        format!(
            "min.js (lines 1-2 of 2)\n     1\t{} [line truncated]\n     2\tshort",
            "é".repeat(2000)
        )
    );
}

#[test]
fn a_100000_line_file_is_paged_and_counted() {
    let dir = tree(&[("huge.log", &lines(100_000, |n| format!("entry {n}")))]);
    let ws = single(dir.path());
    let head = ok(read(&ws, json!({"path": "huge.log"})));
    assert!(head.starts_with("huge.log (lines 1-400 of 100000)\n     1\tentry 1\n"));
    assert!(head.ends_with(
        "\n   400\tentry 400\n[... 99600 more lines; call read_file with start_line=401]"
    ));
    assert_eq!(head.lines().count(), 402);
    assert_eq!(
        ok(read(&ws, json!({"path": "huge.log", "start_line": 99_998}))),
        "huge.log (lines 99998-100000 of 100000)\n 99998\tentry 99998\n 99999\tentry 99999\n100000\tentry 100000"
    );
    assert_eq!(
        ok(read(
            &ws,
            json!({"path": "huge.log", "start_line": 50_000, "end_line": 50_001})
        )),
        "huge.log (lines 50000-50001 of 100000)\n 50000\tentry 50000\n 50001\tentry 50001"
    );
}

#[test]
fn line_endings_and_encodings() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "crlf.txt", b"one\r\ntwo\r\n");
    write(dir.path(), "open.txt", b"one\ntwo");
    write(dir.path(), "latin1.txt", b"caf\xe9\n");
    write(dir.path(), "blank.txt", b"\n");
    write(dir.path(), "empty.txt", b"");
    let ws = single(dir.path());
    assert_eq!(
        ok(read(&ws, json!({"path": "crlf.txt"}))),
        "crlf.txt (lines 1-2 of 2)\n     1\tone\n     2\ttwo"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "open.txt"}))),
        "open.txt (lines 1-2 of 2)\n     1\tone\n     2\ttwo"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "latin1.txt"}))),
        "latin1.txt (lines 1-1 of 1)\n     1\tcaf\u{fffd}"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "blank.txt"}))),
        "blank.txt (lines 1-1 of 1)\n     1\t"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "empty.txt"}))),
        "empty.txt (empty file)"
    );
}

#[test]
fn refuses_binary_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    // A NUL byte past the first 8 KiB does not make a file binary.
    let mut late = vec![b'a'; 9000];
    late.extend_from_slice(b"\0\nok\n");
    write(dir.path(), "late.txt", &late);
    let ws = single(dir.path());
    assert_eq!(
        error(read(&ws, json!({"path": "image.png"}))),
        "image.png is a binary file (it contains NUL bytes); read_file shows text files only"
    );
    let out = ok(read(&ws, json!({"path": "late.txt", "start_line": 2})));
    assert_eq!(out, "late.txt (lines 2-2 of 2)\n     2\tok");
}

#[test]
fn refuses_bad_ranges() {
    let dir = tree(&[("a.txt", "1\n2\n3\n")]);
    let ws = single(dir.path());
    let cases = [
        (json!({"path": "a.txt", "start_line": 4}), "start_line 4 is beyond the end of a.txt, which has 3 lines"),
        (json!({"path": "a.txt", "start_line": 0}), "start_line must be 1 or more: lines are numbered from 1"),
        (json!({"path": "a.txt", "start_line": 3, "end_line": 2}), "end_line 2 is before start_line 3"),
        (json!({"path": "a.txt", "start_line": -1}), "invalid arguments: invalid value: integer `-1`, expected u64"),
        (json!({"path": "a.txt", "lines": 3}), "invalid arguments: unknown field `lines`, expected one of `path`, `start_line`, `end_line`"),
        (json!({}), "invalid arguments: missing field `path`"),
    ];
    for (arguments, expected) in cases {
        assert_eq!(error(read(&ws, arguments.clone())), expected, "{arguments}");
    }
}

#[test]
fn refuses_hostile_and_wrong_paths() {
    let outside = tree(&[("secret.txt", "secret\n")]);
    let dir = tree(&[
        ("src/lib.rs", "fn main() {}\n"),
        (".git/config", "[core]\n"),
    ]);
    symlink(outside.path().join("secret.txt"), dir.path().join("escape")).unwrap();
    symlink(outside.path(), dir.path().join("src/outside_dir")).unwrap();
    symlink("lib.rs", dir.path().join("src/alias.rs")).unwrap();
    let ws = single(dir.path());
    let cases = [
        (
            "../secret.txt",
            r#"path "../secret.txt" leaves the working root"#,
        ),
        (
            "src/../../x",
            r#"path "src/../../x" leaves the working root"#,
        ),
        (
            "/etc/passwd",
            r#"path "/etc/passwd" is absolute; paths are relative to the working root"#,
        ),
        (
            ".git/config",
            r#"path ".git/config" is inside .git, which is not part of the checkout"#,
        ),
        (
            ".GIT/config",
            r#"path ".GIT/config" is inside .git, which is not part of the checkout"#,
        ),
        (
            "escape",
            r#"path "escape" resolves outside the repository through a symlink"#,
        ),
        (
            "src/outside_dir/secret.txt",
            r#"path "src/outside_dir/secret.txt" resolves outside the repository through a symlink"#,
        ),
        (
            "src/missing.rs",
            r#"path "src/missing.rs" does not exist; use list_dir or search to find files"#,
        ),
        ("src", "src is a directory; use list_dir to see its entries"),
        (".", ". is a directory; use list_dir to see its entries"),
    ];
    for (path, expected) in cases {
        assert_eq!(error(read(&ws, json!({"path": path}))), expected, "{path}");
    }
    // A symlink inside the checkout is followed and shown under its real path.
    assert_eq!(
        ok(read(&ws, json!({"path": "src/alias.rs"}))),
        "src/lib.rs (lines 1-1 of 1)\n     1\tfn main() {}"
    );
}

#[test]
fn multi_repository_paths() {
    let app = tree(&[("src/main.rs", "fn main() {}\n")]);
    let lib = tree(&[("src/main.rs", "pub fn lib() {}\n")]);
    let ws = multi(&[("app", app.path()), ("lib", lib.path())]);
    assert_eq!(
        ok(read(&ws, json!({"path": "lib/src/main.rs"}))),
        "lib/src/main.rs (lines 1-1 of 1)\n     1\tpub fn lib() {}"
    );
    assert_eq!(
        ok(read(&ws, json!({"path": "app/../lib/src/main.rs"}))),
        "lib/src/main.rs (lines 1-1 of 1)\n     1\tpub fn lib() {}"
    );
    assert_eq!(
        error(read(&ws, json!({"path": "src/main.rs"}))),
        r#"path "src/main.rs" does not start with a repository name; the working root holds one folder per repository: app, lib"#
    );
    assert_eq!(
        error(read(&ws, json!({"path": "app/../../x"}))),
        r#"path "app/../../x" leaves the working root"#
    );
    assert_eq!(
        error(read(&ws, json!({"path": "."}))),
        r#""." is the working root, a directory; use list_dir to see its entries"#
    );
    assert_eq!(
        error(read(&ws, json!({"path": "app"}))),
        "app is a directory; use list_dir to see its entries"
    );
}

#[test]
fn workspace_resolve_reports_repo_and_canonical_path() {
    let app = tree(&[("src/main.rs", "")]);
    let lib = tree(&[("a.rs", "")]);
    symlink("src/main.rs", app.path().join("link")).unwrap();
    let ws = multi(&[("lib", lib.path()), ("app", app.path())]);
    let resolved = ws.resolve("app/link").unwrap();
    assert_eq!(resolved.repo, "app");
    assert_eq!(resolved.relative, "src/main.rs");
    assert_eq!(
        resolved.absolute,
        app.path().canonicalize().unwrap().join("src/main.rs")
    );
    assert_eq!(ws.resolve("lib").unwrap().relative, ".");
    assert!(ws.resolve("").unwrap_err().contains("is the working root"));
    let one = single(app.path());
    assert_eq!(
        one.resolve("./src//main.rs").unwrap().relative,
        "src/main.rs"
    );
    assert_eq!(one.display_path("app", "src/main.rs"), "src/main.rs");
}
