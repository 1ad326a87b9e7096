//! What the commands print, kept as snapshots (`insta`, under `snapshots/`): a question's answer,
//! a change's live progress and result, the task list, a task, its timeline, its diff with and
//! without a terminal, and refusals of bad input. Ids, hashes, paths, times and durations are
//! replaced by placeholders first; everything else must match byte for byte.
//!
//! A changed snapshot fails the test; `INSTA_UPDATE=always cargo test -p warden-cli --test all
//! snapshots` rewrites them (review the diff before committing it).

use super::server_harness::{call, change_repo};
use super::support::{Run, Warden};
use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::ScriptedModelServer;

/// `text` with what differs between two runs replaced: the repository's and home's paths, task
/// ids, git hashes, RFC 3339 and console times, durations.
fn normalized(text: &str, warden: &Warden, repo: &TempRepo) -> String {
    // git's fetch progress (`Receiving objects: 100% (6/6), 391 bytes | 391.00 KiB/s, done.`)
    // depends on timing; on a terminal its interim percentages are shown too.
    let mut text: String = text
        .lines()
        .filter(|line| !line.starts_with("warden: fetching "))
        .map(|line| format!("{line}\n"))
        .collect();
    for (path, name) in [
        (repo.path().to_path_buf(), "[repo]"),
        (warden.home.path().to_path_buf(), "[home]"),
    ] {
        if let Ok(real) = path.canonicalize() {
            text = text.replace(real.to_str().unwrap(), name);
        }
        text = text.replace(path.to_str().unwrap(), name);
    }
    // The repository's name is its temporary directory's.
    let name = repo.path().file_name().unwrap().to_str().unwrap();
    text = text.replace(name, "[repo-name]");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
        let word_end = |from: usize| {
            let mut end = from;
            while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
                end += 1;
            }
            end
        };
        if starts_word {
            let end = word_end(i);
            let word: String = chars[i..end].iter().collect();
            if let Some(prefix) = ["tsk_", "prp_", "apr_"]
                .into_iter()
                .find(|prefix| word.starts_with(prefix) && word.len() == 30)
            {
                out.push_str(&format!("{prefix}[id]"));
                i = end;
                continue;
            }
            let hex = word.len() >= 7 && word.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
            if hex && (word.len() >= 10 || word.chars().any(|c| c.is_ascii_digit())) {
                out.push_str("[hash]");
                i = end;
                continue;
            }
            if let Some((len, placeholder)) = time_at(&chars[i..]) {
                out.push_str(placeholder);
                i += len;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The length of a time or duration starting `chars`, and its placeholder: `2026-12-05T11:19:25Z`
/// (fractions and offsets too), `2026-12-05 11:19 UTC`, `2026-12-05`, `1.5 s`, `478 ms`, `3s`,
/// `2 min 5 s`.
fn time_at(chars: &[char]) -> Option<(usize, &'static str)> {
    let digits = |from: usize| {
        let mut end = from;
        while end < chars.len() && chars[end].is_ascii_digit() {
            end += 1;
        }
        end
    };
    let first = digits(0);
    if first == 0 {
        return None;
    }
    let at = |index: usize, c: char| chars.get(index) == Some(&c);
    // A calendar day, maybe with a time of day.
    if first == 4 && at(4, '-') && digits(5) == 7 && at(7, '-') && digits(8) == 10 {
        let mut end = 10;
        if (at(10, 'T') || at(10, ' ')) && digits(11) == 13 && at(13, ':') && digits(14) == 16 {
            end = 16;
            if at(16, ':') && digits(17) == 19 {
                end = 19;
                if at(19, '.') {
                    end = digits(20);
                }
            }
            if at(end, 'Z') {
                end += 1;
            } else if (at(end, '+') || at(end, '-')) && digits(end + 1) == end + 3 {
                end = digits(end + 4);
            } else if chars[end..].starts_with(&[' ', 'U', 'T', 'C']) {
                end += 4;
            }
        }
        return Some((end, "[time]"));
    }
    // A duration: a number, an optional space, a unit; `2 min 5 s` as one.
    let mut end = first;
    if at(end, '.') && digits(end + 1) > end + 1 {
        end = digits(end + 1);
    }
    let unit_after = |from: usize| -> Option<usize> {
        let from = if at(from, ' ') { from + 1 } else { from };
        ["min", "ms", "s"].iter().find_map(|unit| {
            let unit: Vec<char> = unit.chars().collect();
            let after = from + unit.len();
            (chars[from.min(chars.len())..].starts_with(&unit)
                && chars.get(after).is_none_or(|c| !c.is_alphanumeric()))
            .then_some(after)
        })
    };
    let mut after = unit_after(end)?;
    if at(after, ' ') && digits(after + 1) > after + 1 {
        if let Some(more) = unit_after(digits(after + 1)) {
            after = more;
        }
    }
    Some((after, "[t]"))
}

/// stdout and stderr of `run`, each labelled, normalised.
fn shown(run: &Run, warden: &Warden, repo: &TempRepo) -> String {
    format!(
        "exit code: {}\n--- stdout\n{}--- stderr\n{}",
        run.code,
        normalized(&run.stdout, warden, repo),
        normalized(&run.stderr, warden, repo)
    )
}

/// A warden on a scripted model, with no heartbeat lines (a loaded machine would add them).
fn warden_on(server: &ScriptedModelServer) -> Warden {
    Warden::openai(&server.url()).with("WARDEN_HEARTBEAT_SECS", "3600")
}

#[test]
fn a_change_from_the_first_check_to_its_diff() {
    let repo = change_repo();
    let server = ScriptedModelServer::start_blocking(vec![
        call("run_checks", json!({})),
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        call(
            "submit_change",
            json!({"summary": "Make beta uppercase\n\nThe check wants BETA."}),
        ),
    ]);
    let warden = warden_on(&server);
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--check",
        "bash check.sh",
        "make beta uppercase",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    insta::assert_snapshot!("run", shown(&run, &warden, &repo));

    let tasks = warden.run(&["tasks"]);
    insta::assert_snapshot!("tasks", shown(&tasks, &warden, &repo));
    let id = tasks.stdout.split_whitespace().next().unwrap().to_string();

    let show = warden.run(&["show", &id]);
    insta::assert_snapshot!("show", shown(&show, &warden, &repo));

    let logs = warden.run(&["logs", &id]);
    insta::assert_snapshot!("logs", shown(&logs, &warden, &repo));

    let diff = warden.run(&["diff", &id]);
    insta::assert_snapshot!("diff_piped", shown(&diff, &warden, &repo));
    // On a terminal: coloured, through the pager (`cat` here, so the output stays whole).
    let on_terminal = warden.run_on_terminal(&["diff", &id], &[("WARDEN_PAGER", "cat")]);
    insta::assert_snapshot!(
        "diff_terminal",
        shown(&on_terminal, &warden, &repo).replace('\x1b', "<ESC>")
    );
}

#[test]
fn a_question_s_answer_piped_and_on_a_terminal() {
    let repo = TempRepo::new();
    repo.write(
        "src/retry.rs",
        "// Retries.\npub fn retry(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    );
    repo.commit("initial");
    let answer = json!({
        "summary": "`retry` doubles the number of attempts.",
        "claims": [{
            "text": "retry returns twice its argument",
            "basis": "observed",
            "evidence": [{"path": "src/retry.rs", "start_line": 2, "end_line": 4}]
        }]
    });
    let script = || {
        vec![
            call(
                "read_file",
                json!({"path": "src/retry.rs", "start_line": 1, "end_line": 4}),
            ),
            call("submit_answer", answer.clone()),
        ]
    };
    let path = repo.path().to_str().unwrap();
    let server = ScriptedModelServer::start_blocking(script());
    let warden = warden_on(&server);
    let piped = warden.run(&["ask", "--repo", path, "what does retry do?"]);
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    insta::assert_snapshot!("ask_piped", shown(&piped, &warden, &repo));

    let server = ScriptedModelServer::start_blocking(script());
    let warden = warden_on(&server);
    let on_terminal = warden.run_on_terminal(&["ask", "--repo", path, "what does retry do?"], &[]);
    insta::assert_snapshot!(
        "ask_terminal",
        shown(&on_terminal, &warden, &repo).replace('\x1b', "<ESC>")
    );
}

#[test]
fn refusals_of_bad_input() {
    let repo = change_repo();
    let warden = Warden::faux();
    let path = repo.path().to_str().unwrap();
    let missing = format!("{path}/./nowhere/../absent");
    let mut shown_all = String::new();
    for args in [
        vec!["ask", "--repo", path, "   "],
        vec!["ask", "--repo", &missing, "where?"],
        vec!["show", "tsk_00000000000000000000000000"],
        vec!["show", "not-a-task"],
        vec!["run", "--repo", path, "--check", "", "do it"],
    ] {
        let run = warden.run(&args);
        assert_ne!(run.code, 0, "{args:?} was accepted");
        shown_all.push_str(&format!(
            "$ warden {}\n{}\n",
            normalized(&args.join(" "), &warden, &repo),
            shown(&run, &warden, &repo)
        ));
    }
    insta::assert_snapshot!("refusals", shown_all);
}

#[test]
fn the_normaliser_replaces_only_what_differs_between_runs() {
    let repo = TempRepo::new();
    let warden = Warden::new();
    let text = format!(
        "task tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9 at {}/src@0696bf1c2d3e in 1.5 s, 478 ms, 2 min 5 s, \
         3s; 2026-12-05T11:19:25.123Z 2026-12-05 11:19 UTC; exit code 101, 3 files, added faded\n\
         warden: fetching x: Receiving objects:  16% (1/6)\n\
         prp_01M92ZJA1958VN47H3JEMNRYDZ on {}",
        repo.path().display(),
        repo.path().file_name().unwrap().to_str().unwrap()
    );
    assert_eq!(
        normalized(&text, &warden, &repo),
        "task tsk_[id] at [repo]/src@[hash] in [t], [t], [t], [t]; [time] [time]; exit code 101, \
         3 files, added faded\nprp_[id] on [repo-name]\n"
    );
}
