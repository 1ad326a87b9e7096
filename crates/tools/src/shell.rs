//! The `shell` tool: `bash -c` inside the task's sandbox view, cwd = the working root, an
//! allow-listed environment (nothing from the host, no model key), bounded output and a
//! per-call timeout. The command runs as written: there is no filter by program name. Such a
//! filter is defeated by any rewrite of the name (`$(printf cu)rl`, `c''url`) and refuses
//! legitimate uses, so it would only look like a boundary; the sandbox's OS layers (namespaces,
//! Landlock, seccomp, cgroups, or gVisor) are the boundary, and what they refuse fails inside
//! the sandbox whatever the command is called.

use crate::blocking;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use warden_runtime::{BoxFuture, Tool, ToolOutput, ToolSpec};
use warden_sandbox::{CommandSpec, ResourceLimits, SandboxView};

/// Default and largest per-call timeouts.
const DEFAULT_TIMEOUT_MS: u64 = 60_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Bytes of stdout and stderr kept per call.
const OUTPUT_LIMIT: usize = 32 * 1024;

/// `shell`: runs a command in the sandbox view of the task.
pub struct Shell {
    view: Arc<Box<dyn SandboxView>>,
    limits: ResourceLimits,
    env: Vec<(String, String)>,
}

impl Shell {
    pub fn new(view: Arc<Box<dyn SandboxView>>, limits: ResourceLimits) -> Shell {
        Shell {
            view,
            limits,
            env: warden_sandbox::baseline_env(),
        }
    }

    /// Commands get `env` (the allow-listed baseline with the configured toolchains' `PATH`
    /// and variables) instead of the bare baseline.
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Shell {
        self.env = env;
        self
    }
}

impl Tool for Shell {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "Run a bash command in an isolated sandbox whose working directory is \
                the working root (read-only for questions). No network, no host files, no \
                secrets. Output is capped; prefer read_file, list_dir and search for reading \
                code, and use shell for things like `git`-free inspection, `wc`, running a \
                script or a tool."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "maxLength": 20000},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS,
                        "description": "Per-call limit in milliseconds (default 60000)."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &Value) -> String {
        let command = arguments["command"].as_str().unwrap_or_default();
        let first: String = command
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(80)
            .collect();
        format!("shell {first}")
    }

    fn note(&self, output: &ToolOutput) -> Option<String> {
        match output {
            ToolOutput::Error(text) => crate::not_found_lines(text),
            _ => None,
        }
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let command = arguments["command"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let timeout_ms = arguments["timeout_ms"]
            .as_u64()
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .min(MAX_TIMEOUT_MS);
        let view = self.view.clone();
        let limits = self.limits;
        let env = self.env.clone();
        Box::pin(async move {
            let mut spec = CommandSpec::bash(&command, Duration::from_millis(timeout_ms));
            spec.output_limit = OUTPUT_LIMIT;
            spec.limits = limits;
            spec.env = env;
            match blocking::run(move || view.run(&spec)).await {
                None => ToolOutput::Error("the sandboxed command crashed Warden's runner".into()),
                // A lost remote sandbox runs nothing any more: the run ends, it does not retry
                // into it (a new run opens a new view).
                Some(Err(error @ warden_sandbox::SandboxError::Lost { .. })) => {
                    ToolOutput::Stop(warden_protocol::Failure {
                        code: warden_protocol::FailureCode::SandboxError,
                        message: error.to_string(),
                    })
                }
                Some(Err(error)) => ToolOutput::Error(format!("sandbox error: {error}")),
                Some(Ok(output)) => {
                    let mut text = match (output.exit_code, output.signal) {
                        _ if output.timed_out => {
                            format!("timed out after {timeout_ms} ms (process tree killed)\n")
                        }
                        (Some(code), _) => format!("exit code {code}\n"),
                        (None, Some(signal)) => format!("killed by signal {signal}\n"),
                        (None, None) => "exit status unknown\n".to_string(),
                    };
                    for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
                        if !bytes.is_empty() {
                            text.push_str(&format!(
                                "--- {name} ---\n{}\n",
                                String::from_utf8_lossy(bytes).trim_end()
                            ));
                        }
                    }
                    let note = crate::not_found_note(
                        output.exit_code,
                        &String::from_utf8_lossy(&output.stderr),
                    );
                    if !note.is_empty() {
                        text.push_str(&format!("{note}\n"));
                    }
                    if output.exit_code == Some(0) {
                        ToolOutput::Ok(text)
                    } else {
                        ToolOutput::Error(text)
                    }
                }
            }
        })
    }
}

pub(crate) fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Splits a bash script into the argv of its simple commands, for naming the programs a check
/// looks up (a usability hint when one is missing, never a boundary): quotes and backslashes are
/// honoured, and `;`, `&`, `|`, newlines, `(`, `)`, `` ` `` and `$(` start a new command. This is
/// deliberately conservative: anything it cannot follow (an unterminated quote) is refused.
pub(crate) fn simple_commands(script: &str) -> Result<Vec<Vec<String>>, String> {
    let mut commands = Vec::new();
    let mut argv: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_word = |argv: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            argv.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    if next != '\n' {
                        word.push(next);
                        in_word = true;
                    }
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => {
                            if let Some(ch) = chars.next() {
                                word.push(ch);
                            }
                        }
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '#' if !in_word => {
                for ch in chars.by_ref() {
                    if ch == '\n' {
                        break;
                    }
                }
                end_word(&mut argv, &mut word, &mut in_word);
                if !argv.is_empty() {
                    commands.push(std::mem::take(&mut argv));
                }
            }
            // `2>&1`, `>&2`, `<&0` and `&>file` are redirections, not background commands.
            '&' if (in_word && word.ends_with(['>', '<'])) || chars.peek() == Some(&'>') => {
                word.push(c);
                in_word = true;
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' | '{' | '}' => {
                end_word(&mut argv, &mut word, &mut in_word);
                if !argv.is_empty() {
                    commands.push(std::mem::take(&mut argv));
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                end_word(&mut argv, &mut word, &mut in_word);
                if !argv.is_empty() {
                    commands.push(std::mem::take(&mut argv));
                }
            }
            c if c.is_whitespace() => end_word(&mut argv, &mut word, &mut in_word),
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut argv, &mut word, &mut in_word);
    if !argv.is_empty() {
        commands.push(argv);
    }
    Ok(commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(script: &str) -> Vec<Vec<String>> {
        simple_commands(script).unwrap()
    }

    #[test]
    fn scripts_split_into_simple_commands() {
        assert_eq!(split("ls -la"), [["ls", "-la"]]);
        assert_eq!(
            split("ls; FOO=1 wget x && (cd src | wc -l)"),
            vec![
                vec!["ls"],
                vec!["FOO=1", "wget", "x"],
                vec!["cd", "src"],
                vec!["wc", "-l"]
            ]
        );
        assert_eq!(split("echo $(curl x)"), [vec!["echo"], vec!["curl", "x"]]);
        assert_eq!(
            split("echo `nc -l 80`"),
            [vec!["echo"], vec!["nc", "-l", "80"]]
        );
        assert_eq!(
            split("cat README.md # curl http://x"),
            [["cat", "README.md"]]
        );
        assert_eq!(
            split("echo 'a b' \"c\\\"d\" c\\url"),
            [["echo", "a b", "c\"d", "curl"]]
        );
        assert_eq!(
            split("make 2>&1 >/dev/null &> log"),
            [["make", "2>&1", ">/dev/null", "&>", "log"]]
        );
        assert!(simple_commands("echo 'unterminated").is_err());
        assert!(is_assignment("FOO_1=x") && !is_assignment("=x") && !is_assignment("a-b=x"));
    }
}
