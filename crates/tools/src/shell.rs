//! The `shell` tool: `bash -c` inside the task's sandbox view, cwd = the working root, an
//! allow-listed environment (nothing from the host, no model key), bounded output and a
//! per-call timeout. Before a command runs, a policy over its parsed argv refuses programs that
//! have no business in an investigation (privilege, namespace and network tools). That policy
//! is defence in depth: the sandbox (namespaces, Landlock, seccomp, cgroups) is the boundary.

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

/// Programs refused wherever they appear as a command name in the script.
const REFUSED_PROGRAMS: &[(&str, &str)] = &[
    ("sudo", "privilege escalation"),
    ("su", "privilege escalation"),
    ("doas", "privilege escalation"),
    ("pkexec", "privilege escalation"),
    ("mount", "mounting file systems"),
    ("umount", "mounting file systems"),
    ("nsenter", "entering namespaces"),
    ("unshare", "creating namespaces"),
    ("chroot", "changing the root"),
    ("ssh", "network access"),
    ("scp", "network access"),
    ("curl", "network access"),
    ("wget", "network access"),
    ("nc", "network access"),
    ("ncat", "network access"),
    ("socat", "network access"),
    ("telnet", "network access"),
];

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
            if let Err(reason) = check_command(&command) {
                return ToolOutput::Error(format!("command refused: {reason}"));
            }
            let mut spec = CommandSpec::bash(&command, Duration::from_millis(timeout_ms));
            spec.output_limit = OUTPUT_LIMIT;
            spec.limits = limits;
            spec.env = env;
            match blocking::run(move || view.run(&spec)).await {
                None => ToolOutput::Error("the sandboxed command crashed Warden's runner".into()),
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

/// Refuses a script any of whose simple commands names a refused program (by basename, also
/// behind `env`, `command`, `exec`, `nohup`, `timeout`, `xargs` or `busybox`).
pub fn check_command(script: &str) -> Result<(), String> {
    for argv in simple_commands(script)? {
        let mut words = argv.iter().map(String::as_str).peekable();
        // Skip leading assignments (`FOO=1 cmd`).
        while words.peek().is_some_and(|w| is_assignment(w)) {
            words.next();
        }
        let mut rest: Vec<&str> = words.collect();
        while let Some(first) = rest.first() {
            let name = first.rsplit('/').next().unwrap_or(first);
            if let Some((_, why)) = REFUSED_PROGRAMS.iter().find(|(p, _)| *p == name) {
                return Err(format!("`{name}` is not allowed ({why})"));
            }
            // Wrappers run their argument as a command: look through them.
            if matches!(
                name,
                "env"
                    | "command"
                    | "exec"
                    | "nohup"
                    | "timeout"
                    | "xargs"
                    | "busybox"
                    | "nice"
                    | "time"
                    | "stdbuf"
            ) {
                rest.remove(0);
                while rest.first().is_some_and(|w| {
                    w.starts_with('-') || is_assignment(w) || w.parse::<f64>().is_ok()
                }) {
                    rest.remove(0);
                }
                continue;
            }
            break;
        }
    }
    Ok(())
}

pub(crate) fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Splits a bash script into the argv of its simple commands: quotes and backslashes are
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

    fn check(script: &str, allowed: bool) {
        assert_eq!(
            check_command(script).is_ok(),
            allowed,
            "{script:?}: {:?}",
            check_command(script)
        );
    }

    #[test]
    fn policy_table() {
        check("ls -la", true);
        check("grep -rn sudo src | wc -l", true);
        check("echo 'curl is just a word here'", true);
        check("cat README.md # curl http://x", true);
        check("sudo ls", false);
        check("/usr/bin/sudo ls", false);
        check("ls; curl http://example.com", false);
        check("ls && FOO=1 wget x", false);
        check("echo $(curl x)", false);
        check("echo `nc -l 80`", false);
        check("env -i PATH=/bin curl x", false);
        check("timeout 5 ssh host", false);
        check("xargs -n1 nc < hosts", false);
        check("(cd src && mount /dev/sda /mnt)", false);
        check("c\\url http://x", false);
        check("'curl' x", false);
        check("echo 'unterminated", false);
    }
}
