//! search: regex and literal matching, ordering, caps, ignore rules, globs, binary files,
//! symlinks and multi-repo roots.

use super::*;
use serde_json::json;
use std::os::unix::fs::symlink;

fn search(workspace: &Arc<Workspace>, arguments: serde_json::Value) -> ToolOutput {
    call(workspace, "search", arguments)
}

#[test]
fn regex_by_default_literal_on_request() {
    let dir = tree(&[("src/a.rs", "let abc = 1;\nlet a.c = 2;\nfn retry() {}\n")]);
    let ws = single(dir.path());
    assert_eq!(
        ok(search(&ws, json!({"pattern": "a.c"}))),
        "src/a.rs:1:let abc = 1;\nsrc/a.rs:2:let a.c = 2;"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "a.c", "literal": true}))),
        "src/a.rs:2:let a.c = 2;"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "fn \\w+\\(\\)"}))),
        "src/a.rs:3:fn retry() {}"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "retry()", "literal": true}))),
        "src/a.rs:3:fn retry() {}"
    );
}

#[test]
fn case_sensitive_unless_asked() {
    let dir = tree(&[("a.txt", "Retry\nretry\nRETRY\n")]);
    let ws = single(dir.path());
    assert_eq!(
        ok(search(&ws, json!({"pattern": "retry"}))),
        "a.txt:2:retry"
    );
    assert_eq!(
        ok(search(
            &ws,
            json!({"pattern": "retry", "case_insensitive": true})
        )),
        "a.txt:1:Retry\na.txt:2:retry\na.txt:3:RETRY"
    );
}

#[test]
fn invalid_regex_and_no_match() {
    let dir = tree(&[("a.txt", "x\n")]);
    let ws = single(dir.path());
    let message = error(search(&ws, json!({"pattern": "fn (("})));
    assert!(message.starts_with("invalid pattern: "), "{message}");
    assert!(message.contains("unclosed group"), "{message}");
    assert_eq!(
        ok(search(&ws, json!({"pattern": "zzz"}))),
        "no matches for zzz"
    );
    assert_eq!(
        error(search(&ws, json!({"pattern": ""}))),
        "pattern is empty; give the text or regex to look for"
    );
    assert_eq!(
        error(search(&ws, json!({"pattern": "x", "glob": "{a"}))),
        "invalid glob \"{a\": error parsing glob '{a': unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"
    );
    let message = error(search(&ws, json!({"pattern": "x", "regex": true})));
    assert!(
        message.starts_with("invalid arguments: unknown field `regex`"),
        "{message}"
    );
}

#[test]
fn output_is_sorted_and_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    // Enough files and directories that the parallel walk finishes them out of order.
    for d in ["b", "a", "c/z", "c/a", "a-b", "a.b"] {
        for f in (0..40).rev() {
            let path = format!("{d}/f{f:02}.txt");
            write(
                dir.path(),
                &path,
                format!("nothing\nneedle {f}\nneedle again\n").as_bytes(),
            );
        }
    }
    // Component order: a, a-b, a.b, b, c/a, c/z (a directory's files before its siblings).
    for d in ["a", "a-b", "a.b", "b", "c/a", "c/z"] {
        for f in 0..40 {
            expected.push(format!("{d}/f{f:02}.txt:2:needle {f}"));
            expected.push(format!("{d}/f{f:02}.txt:3:needle again"));
        }
    }
    let ws = single(dir.path());
    let first = ok(search(&ws, json!({"pattern": "needle"})));
    let shown: Vec<&str> = first.lines().take(200).collect();
    assert_eq!(shown, expected[..200]);
    assert_eq!(
        first.lines().nth(200),
        Some("[... 280 more matches not shown; narrow the pattern, path or glob]")
    );
    for _ in 0..5 {
        assert_eq!(ok(search(&ws, json!({"pattern": "needle"}))), first);
    }
}

#[test]
fn caps_matches_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (0..250).map(|n| format!("hit {n}\n")).collect();
    write(dir.path(), "a.txt", body.as_bytes());
    write(dir.path(), "b.txt", b"hit b\n");
    let ws = single(dir.path());
    let out = ok(search(&ws, json!({"pattern": "hit"})));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[0], "a.txt:1:hit 0");
    assert_eq!(lines[199], "a.txt:200:hit 199");
    assert_eq!(
        lines[200],
        "[... 51 more matches not shown; narrow the pattern, path or glob]"
    );
    // Under the cap nothing is added.
    assert_eq!(
        ok(search(&ws, json!({"pattern": "hit b"}))),
        "b.txt:1:hit b"
    );
}

#[test]
fn stops_counting_at_the_count_cap() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (0..1_000).map(|n| format!("x{n}\n")).collect();
    for f in 0..30 {
        write(dir.path(), &format!("d{f:02}.txt"), body.as_bytes());
    }
    let ws = single(dir.path());
    let out = ok(search(&ws, json!({"pattern": "x"})));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[0], "d00.txt:1:x0");
    assert_eq!(lines[199], "d00.txt:200:x199");
    assert_eq!(
        lines[200],
        "[... at least 9800 more matches not shown; narrow the pattern, path or glob]"
    );
    for _ in 0..3 {
        assert_eq!(ok(search(&ws, json!({"pattern": "x"}))), out);
    }
    // Just under the cap the count is exact.
    let dir = tempfile::tempdir().unwrap();
    for f in 0..9 {
        write(dir.path(), &format!("d{f}.txt"), body.as_bytes());
    }
    write(
        dir.path(),
        "e.txt",
        (0..999)
            .map(|n| format!("x{n}\n"))
            .collect::<String>()
            .as_bytes(),
    );
    let ws = single(dir.path());
    let out = ok(search(&ws, json!({"pattern": "x"})));
    assert!(
        out.ends_with("\n[... 9799 more matches not shown; narrow the pattern, path or glob]"),
        "{}",
        &out[out.len() - 100..]
    );
}

#[test]
fn truncates_long_lines_and_trims_line_ends() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("needle {}\n", "ü".repeat(1000));
    write(dir.path(), "long.js", long.as_bytes());
    write(dir.path(), "crlf.txt", b"needle here\r\nneedle end");
    let ws = single(dir.path());
    let expected_long = format!("long.js:1:needle {} [truncated]", "ü".repeat(293));
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        format!("crlf.txt:1:needle here\ncrlf.txt:2:needle end\n{expected_long}")
    );
}

#[test]
fn respects_ignore_files_and_hides_git() {
    let dir = tree(&[
        (".gitignore", "target/\n*.log\n/src/generated/\n"),
        (".ignore", "scratch/\n"),
        (".github/ci.yml", "needle: hidden files are searched\n"),
        (".git/config", "needle in git\n"),
        (".git/hooks/pre-commit", "needle in git\n"),
        ("target/out.rs", "needle ignored\n"),
        ("scratch/a.txt", "needle ignored\n"),
        ("run.log", "needle ignored\n"),
        ("src/lib.rs", "needle\n"),
        ("src/generated/x.rs", "needle ignored\n"),
        ("src/sub/.gitignore", "local.rs\n"),
        ("src/sub/local.rs", "needle ignored\n"),
    ]);
    let ws = single(dir.path());
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        ".github/ci.yml:1:needle: hidden files are searched\nsrc/lib.rs:1:needle"
    );
    // Rules from above the searched directory still apply ...
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "path": "src"}))),
        "src/lib.rs:1:needle"
    );
    // ... but a directory or file named explicitly is searched, like ripgrep does.
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "path": "target"}))),
        "target/out.rs:1:needle ignored"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "path": "run.log"}))),
        "run.log:1:needle ignored"
    );
    assert_eq!(
        error(search(&ws, json!({"pattern": "needle", "path": ".git"}))),
        r#"path ".git" is inside .git, which is not part of the checkout"#
    );
}

#[test]
fn ignore_files_above_the_snapshot_do_not_apply() {
    let host = tempfile::tempdir().unwrap();
    write_tree(
        host.path(),
        &[(".gitignore", "*\n"), ("snap/a.rs", "needle\n")],
    );
    let ws = single(&host.path().join("snap"));
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        "a.rs:1:needle"
    );
}

#[test]
fn globs_filter_file_names() {
    let dir = tree(&[
        ("src/a.rs", "needle\n"),
        ("src/b.ts", "needle\n"),
        ("docs/c.md", "needle\n"),
        ("README.md", "needle\n"),
    ]);
    let ws = single(dir.path());
    let cases = [
        ("*.rs", "src/a.rs:1:needle"),
        ("*.{rs,ts}", "src/a.rs:1:needle\nsrc/b.ts:1:needle"),
        ("!*.md", "src/a.rs:1:needle\nsrc/b.ts:1:needle"),
        ("docs/*", "docs/c.md:1:needle"),
        ("*.py", "no matches for needle"),
    ];
    for (glob, expected) in cases {
        assert_eq!(
            ok(search(&ws, json!({"pattern": "needle", "glob": glob}))),
            expected,
            "{glob}"
        );
    }
    // A glob also applies to a file named as the path.
    assert_eq!(
        ok(search(
            &ws,
            json!({"pattern": "needle", "path": "README.md", "glob": "*.rs"})
        )),
        "no matches for needle"
    );
}

#[test]
fn skips_binary_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.bin", b"needle\0\x01\x02");
    // Binary however late the NUL byte comes.
    let mut late = b"needle\n".repeat(20_000);
    late.push(0);
    write(dir.path(), "b.dat", &late);
    write(dir.path(), "c.txt", b"needle\n");
    let ws = single(dir.path());
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        "c.txt:1:needle"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "path": "a.bin"}))),
        "no matches for needle"
    );
}

#[test]
fn files_larger_than_memory_budget_are_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = b"filler line\n".repeat(1_500_000); // 18 MB
    big.extend_from_slice(b"needle at the end\n");
    write(dir.path(), "big.txt", &big);
    let mut big_binary = big.clone();
    big_binary.push(0);
    write(dir.path(), "big.bin", &big_binary);
    let ws = single(dir.path());
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        "big.txt:1500001:needle at the end"
    );
}

#[test]
fn never_follows_symlinks_out_of_the_checkout() {
    let outside = tree(&[
        ("secret.txt", "needle secret\n"),
        ("dir/key.txt", "needle key\n"),
    ]);
    let dir = tree(&[("src/a.rs", "needle\n")]);
    symlink(
        outside.path().join("secret.txt"),
        dir.path().join("src/secret.rs"),
    )
    .unwrap();
    symlink(outside.path().join("dir"), dir.path().join("src/dir")).unwrap();
    symlink("/", dir.path().join("root")).unwrap();
    symlink("a.rs", dir.path().join("src/alias.rs")).unwrap();
    let ws = single(dir.path());
    // Links are not followed at all: the inside alias is searched once, as its target.
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        "src/a.rs:1:needle"
    );
    for path in ["src/secret.rs", "src/dir", "root", "root/etc"] {
        let message = error(search(&ws, json!({"pattern": "needle", "path": path})));
        assert!(
            message.contains("resolves outside the repository through a symlink"),
            "{path}: {message}"
        );
    }
    for path in ["../", "/etc", ".git/config"] {
        error(search(&ws, json!({"pattern": "needle", "path": path})));
    }
    assert_eq!(
        ok(search(
            &ws,
            json!({"pattern": "needle", "path": "src/alias.rs"})
        )),
        "src/a.rs:1:needle"
    );
}

#[test]
fn multi_repository_search() {
    let app = tree(&[("src/main.rs", "needle app\n"), ("z.txt", "needle z\n")]);
    let lib = tree(&[
        ("lib.rs", "needle lib\n"),
        (".gitignore", "gen/\n"),
        ("gen/x.rs", "needle gen\n"),
    ]);
    let ws = multi(&[("lib", lib.path()), ("app", app.path())]);
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle"}))),
        "app/src/main.rs:1:needle app\napp/z.txt:1:needle z\nlib/lib.rs:1:needle lib"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "path": "lib"}))),
        "lib/lib.rs:1:needle lib"
    );
    assert_eq!(
        ok(search(
            &ws,
            json!({"pattern": "needle", "path": "app/src/main.rs"})
        )),
        "app/src/main.rs:1:needle app"
    );
    assert_eq!(
        ok(search(&ws, json!({"pattern": "needle", "glob": "*.rs"}))),
        "app/src/main.rs:1:needle app\nlib/lib.rs:1:needle lib"
    );
    let message = error(search(&ws, json!({"pattern": "needle", "path": "other"})));
    assert!(message.contains("app, lib"), "{message}");
}

#[test]
fn describes_calls() {
    let dir = tree(&[("a", "")]);
    let tools = question_tools(single(dir.path()));
    let search = tools.iter().find(|t| t.spec().name == "search").unwrap();
    assert_eq!(
        search.describe(&json!({"pattern": "retry", "path": "src"})),
        r#"search "retry" in src"#
    );
    // Regexes stay readable; control characters are escaped so the line stays one line.
    assert_eq!(
        search.describe(&json!({"pattern": r"fn \w+\("})),
        r#"search "fn \w+\(""#
    );
    assert_eq!(
        search.describe(&json!({"pattern": "a\nb"})),
        r#"search "a\nb""#
    );
    assert_eq!(
        search.describe(&json!({"pattern": "x", "glob": "*.rs"})),
        r#"search "x" (*.rs)"#
    );
    let read = tools.iter().find(|t| t.spec().name == "read_file").unwrap();
    assert_eq!(
        read.describe(&json!({"path": "src/lib.rs", "start_line": 10, "end_line": 40})),
        "read_file src/lib.rs:10-40"
    );
    assert_eq!(
        read.describe(&json!({"path": "src/lib.rs"})),
        "read_file src/lib.rs"
    );
    assert_eq!(
        read.describe(&json!({"path": "a\nb", "start_line": 3})),
        "read_file a\\nb:3-"
    );
}
