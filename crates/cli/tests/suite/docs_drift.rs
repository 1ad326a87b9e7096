//! Documentation that cannot drift: every key `warden.toml` accepts (read from the
//! configuration types themselves) is named in docs/configuration.md under its table's
//! heading, every flag of every command (read from the binary's own `--help`) is named in
//! docs/cli.md, and `warden --version` names the commit it was built from.

use super::support::Warden;
use serde::de::{self, Deserialize, Visitor};
use std::path::Path;

/// A deserializer that only records the field names a derived `Deserialize` asks for.
struct FieldProbe<'a>(&'a mut Vec<&'static str>);

impl<'de> de::Deserializer<'de> for FieldProbe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.extend_from_slice(fields);
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The keys of the table `T` deserializes.
fn keys<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
    let mut fields = Vec::new();
    let _ = T::deserialize(FieldProbe(&mut fields));
    assert!(
        !fields.is_empty(),
        "{} has no fields",
        std::any::type_name::<T>()
    );
    fields
}

fn docs(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the `## ` section of `text` whose heading contains `heading`.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .match_indices("\n## ")
        .map(|(at, _)| at + 1)
        .find(|&at| text[at..].lines().next().unwrap_or("").contains(heading))
        .unwrap_or_else(|| panic!("no `## ` heading with {heading}"));
    let end = text[start + 3..]
        .find("\n## ")
        .map_or(text.len(), |at| start + 3 + at);
    &text[start..end]
}

#[test]
fn every_configuration_key_is_documented_under_its_table() {
    use warden_config as config;
    let configuration = docs("configuration.md");
    let maintain = docs("maintain.md");
    // (table, the heading of its section, its keys); a table is documented in
    // configuration.md where its section's heading names it ([maintain] and [[schedules]] in
    // maintain.md, which configuration.md points to).
    let tables: Vec<(&str, &str, Vec<&str>)> = vec![
        ("model", "`[model]`", keys::<config::ModelSection>()),
        ("limits", "`[limits]`", keys::<config::LimitsSection>()),
        ("prices", "`[[prices]]`", keys::<config::PriceEntry>()),
        ("sandbox", "`[sandbox]`", keys::<config::SandboxSection>()),
        ("egress", "`[sandbox]`", keys::<config::EgressSection>()),
        (
            "kubernetes",
            "`[kubernetes]`",
            keys::<config::KubernetesSection>(),
        ),
        ("storage", "`[storage]`", keys::<config::StorageSection>()),
        ("serve", "`[serve]`", keys::<config::ServeSection>()),
        ("web", "`[web]`", keys::<config::WebSection>()),
        (
            "callbacks",
            "`[callbacks]`",
            keys::<config::CallbackSection>(),
        ),
        ("github", "`[github]` and", keys::<config::GithubSection>()),
        (
            "github.app",
            "`[github]` and",
            keys::<config::GithubAppSection>(),
        ),
        ("publish", "`[[publish]]`", keys::<config::PublishEntry>()),
        (
            "github.webhook",
            "`[github.webhook]`",
            keys::<config::GithubWebhookSection>(),
        ),
        (
            "github.webhook.approvers",
            "`[github.webhook]`",
            keys::<config::GithubApproverEntry>(),
        ),
        (
            "telegram",
            "`[telegram]`",
            keys::<config::TelegramSection>(),
        ),
        (
            "telegram.users",
            "`[telegram]`",
            keys::<config::TelegramUserEntry>(),
        ),
        ("slack", "`[slack]`", keys::<config::SlackSection>()),
        ("slack.users", "`[slack]`", keys::<config::SlackUserEntry>()),
        (
            "slack.channels",
            "`[slack]`",
            keys::<config::SlackChannelEntry>(),
        ),
        ("mcp", "`[[mcp.servers]]`", keys::<config::McpSection>()),
        (
            "mcp.servers",
            "`[[mcp.servers]]`",
            keys::<config::McpServerEntry>(),
        ),
        (
            "telemetry",
            "`[telemetry]`",
            keys::<config::TelemetrySection>(),
        ),
        (
            "gates",
            "`[gates]` and `[roles]`",
            keys::<config::GatesSection>(),
        ),
        (
            "roles",
            "`[gates]` and `[roles]`",
            keys::<config::RolesSection>(),
        ),
        (
            "maintain",
            "Configuration: `[maintain]`",
            keys::<config::MaintainSection>(),
        ),
        (
            "schedules",
            "Schedules on `warden serve`",
            keys::<config::ScheduleEntry>(),
        ),
    ];
    // Every table of the file is listed above.
    for table in keys::<config::FileConfig>() {
        assert!(
            tables.iter().any(|(name, _, _)| *name == table),
            "warden.toml's [{table}] is not covered by this test: add it with its section"
        );
    }
    let mut missing = Vec::new();
    for (table, heading, keys) in &tables {
        let text = match *table {
            "maintain" | "schedules" => &maintain,
            _ => &configuration,
        };
        let body = section(text, heading);
        for key in keys {
            // A key naming a sub-table is documented with that table's own keys.
            if tables
                .iter()
                .any(|(name, _, _)| *name == format!("{table}.{key}"))
            {
                continue;
            }
            // `key`, or `[table] key` / `[[table]] key` in a row naming its table.
            if !body.contains(&format!("`{key}`")) && !body.contains(&format!("] {key}`")) {
                missing.push(format!(
                    "[{table}] {key} (under the heading with {heading})"
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys warden.toml accepts that docs/configuration.md does not name:\n{}",
        missing.join("\n")
    );
}

/// Runs `warden ARGS --help` and returns its text.
fn help(warden: &Warden, command: &[&str]) -> String {
    let mut args = command.to_vec();
    args.push("--help");
    let run = warden.run(&args);
    assert_eq!(run.code, 0, "warden {args:?}: {}", run.stderr);
    run.stdout
}

/// The subcommands and `--long` flags a help text lists.
fn commands_and_flags(help: &str) -> (Vec<String>, Vec<String>) {
    let mut commands = Vec::new();
    let mut flags = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if line.ends_with(':') && !line.starts_with(' ') {
            in_commands = line == "Commands:";
            continue;
        }
        let trimmed = line.trim_start();
        if in_commands && line.starts_with("  ") && !line.starts_with("        ") {
            if let Some(name) = trimmed.split_whitespace().next() {
                if name != "help" {
                    commands.push(name.to_string());
                }
            }
        }
        if trimmed.starts_with('-') {
            // The option's own spelling, before its description.
            let spelling = trimmed.split("  ").next().unwrap_or("");
            for word in spelling.split([' ', ',', '=', '[', '<']) {
                if let Some(flag) = word.strip_prefix("--") {
                    if !flag.is_empty() && !flags.contains(&format!("--{flag}")) {
                        flags.push(format!("--{flag}"));
                    }
                }
            }
        }
    }
    (commands, flags)
}

#[test]
fn every_command_and_flag_is_documented_in_cli_md() {
    let text = docs("cli.md");
    let warden = Warden::new();
    let mut missing = Vec::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(command) = queue.pop() {
        seen += 1;
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (commands, flags) = commands_and_flags(&help(&warden, &args));
        let name = format!("warden {}", command.join(" "));
        for sub in commands {
            let mut next = command.clone();
            next.push(sub.clone());
            if !text.contains(&format!("warden {}", next.join(" "))) {
                missing.push(format!("the command `warden {}`", next.join(" ")));
            }
            queue.push(next);
        }
        for flag in flags {
            if flag == "--help" || flag == "--version" && !command.is_empty() {
                continue;
            }
            if !text.contains(&format!("`{flag}")) && !text.contains(&format!(" {flag}")) {
                missing.push(format!("{flag} of `{}`", name.trim_end()));
            }
        }
    }
    assert!(
        seen > 20,
        "only {seen} commands were read: the help parser is broken"
    );
    assert!(
        missing.is_empty(),
        "what `warden --help` lists that docs/cli.md does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let run = Warden::new().run(&["--version"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run.stdout.trim();
    let commit = line
        .strip_prefix(&format!("warden {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    // Built from this checkout: the commit is its HEAD's (or the one WARDEN_COMMIT named).
    match std::env::var("WARDEN_COMMIT") {
        Ok(named) if !named.is_empty() => assert_eq!(commit, named),
        _ => {
            #[allow(clippy::disallowed_methods)] // reads this checkout's HEAD, no sandbox needed
            let head = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .unwrap();
            assert!(head.status.success(), "not a git checkout");
            assert_eq!(
                commit,
                String::from_utf8_lossy(&head.stdout).trim(),
                "{line}"
            );
        }
    }
}

/// configuration.md's complete example: as written, and with every commented key uncommented,
/// Warden's loader accepts it (with the secrets its interfaces need in the environment).
#[test]
fn the_complete_example_loads_as_written_and_uncommented() {
    let text = docs("configuration.md");
    let start = text
        .find("## A complete example")
        .expect("the complete example");
    let block = &text[start..];
    let block = &block[block.find("```toml\n").expect("its toml block") + 8..];
    let example = &block[..block.find("```").expect("the block's end")];
    // `# key = …`, `# [table]` and `# [[table]]` lines are the commented keys.
    let uncommented: String = example
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    }) =>
            {
                rest
            }
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect();
    for table in [
        "[telegram]",
        "[slack]",
        "[github.app]",
        "[[mcp.servers]]",
        "[[schedules]]",
    ] {
        assert!(
            uncommented.lines().any(|line| line.starts_with(table)),
            "{table} is not in the example: {uncommented}"
        );
    }
    let (home, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // What the example's toolchain and mount name, in this home.
    for dir in [".cargo/bin", ".rustup", ".local/opt/tool"] {
        std::fs::create_dir_all(home.path().join(dir)).unwrap();
    }
    std::fs::write(home.path().join(".cargo/bin/cargo"), "").unwrap();
    let key = warden_test_support::github_fake::APP_TEST_KEY_PEM;
    let variables = [
        ("WARDEN_HOME", state.path().to_str().unwrap()),
        ("HOME", home.path().to_str().unwrap()),
        ("WARDEN_TELEGRAM_TOKEN", "123:token"),
        ("WARDEN_SLACK_SIGNING_SECRET", "signing"),
        ("WARDEN_SLACK_BOT_TOKEN", "xoxb-token"),
        ("WARDEN_GITHUB_WEBHOOK_SECRET", "hook-secret"),
        ("WARDEN_GITHUB_TOKEN", "ghp_token"),
        ("WARDEN_GITHUB_APP_PRIVATE_KEY", key),
    ];
    let env = MapEnv(
        variables
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    for (what, text) in [
        ("as written", example),
        ("uncommented", uncommented.as_str()),
    ] {
        let file = state
            .path()
            .join(format!("{}.toml", what.replace(' ', "-")));
        std::fs::write(&file, text).unwrap();
        let config = warden_service::config::load(Some(&file), &env)
            .unwrap_or_else(|e| panic!("the example {what} does not load: {e:#}\n{text}"));
        assert!(
            config.service.problems().is_empty(),
            "{what}: {:?}",
            config.service.problems()
        );
        // The binary resolves `[telemetry]` itself: its doctor loads the example too.
        let warden = variables
            .iter()
            .fold(Warden::new(), |warden, (k, v)| warden.with(k, v));
        let run = warden.run(&[
            "--config",
            file.to_str().unwrap(),
            "doctor",
            "--json",
            "--offline",
        ]);
        let checks = run.json()["checks"].as_array().unwrap().clone();
        let configuration = checks
            .iter()
            .find(|check| check["check"] == "configuration")
            .unwrap_or_else(|| panic!("{what}: no configuration check: {}", run.stdout));
        assert_eq!(configuration["ok"], true, "{what}: {configuration}");
    }
}

struct MapEnv(std::collections::HashMap<String, String>);

impl warden_config::Env for MapEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}
