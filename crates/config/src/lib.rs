//! The shapes of `warden.toml`, where the file is found, and the environment it is read with.
//!
//! Configuration comes from `--config`, else `WARDEN_CONFIG`, else `WARDEN_HOME/warden.toml`
//! (no file there: every default applies). It is never read from a repository or the current
//! directory: a hostile repository cannot change how Warden behaves. Every table rejects
//! unknown keys, so a misspelt key stops start-up with its name.
//!
//! **API Boundary**: this crate only parses. Each layer resolves the sections it uses (values
//! checked, defaults applied, secrets read from the environment): `warden_engine::config` the
//! model, limits, prices, sandbox, storage, kubernetes, egress, MCP, maintenance, gates and
//! roles; `warden_service::config` the service's `[serve]`, `[web]`, `[callbacks]`,
//! `[github]`, `[[publish]]`, `[telegram]`, `[slack]` and `[[schedules]]`; the `warden`
//! binary `[telemetry]`.

#![warn(unreachable_pub)]

mod chat;
mod github;
mod maintain;
mod model;
mod sandbox;
mod serve;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use chat::{
    SlackChannelEntry, SlackSection, SlackUserEntry, TelegramSection, TelegramUserEntry,
};
pub use github::{
    GithubAppSection, GithubApproverEntry, GithubSection, GithubWebhookSection, PublishEntry,
};
pub use maintain::{MaintainSection, ScheduleEntry};
pub use model::{
    GatesSection, LimitsSection, McpSection, McpServerEntry, ModelSection, PriceEntry, RolesSection,
};
pub use sandbox::{EgressSection, KubernetesSection, SandboxSection, StorageSection};
pub use serve::{CallbackSection, ServeSection, TelemetrySection, WebSection};

/// The file's shape. Every table rejects unknown keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub prices: Vec<PriceEntry>,
    #[serde(default)]
    pub sandbox: SandboxSection,
    /// `[kubernetes]`: the `kubernetes` sandbox backend's cluster, template and warm pool.
    #[serde(default)]
    pub kubernetes: KubernetesSection,
    #[serde(default)]
    pub storage: StorageSection,
    /// `[egress]`: what `prepare` reaches through Warden's egress proxy.
    #[serde(default)]
    pub egress: EgressSection,
    #[serde(default)]
    pub serve: ServeSection,
    #[serde(default)]
    pub web: WebSection,
    #[serde(default)]
    pub callbacks: CallbackSection,
    #[serde(default)]
    pub github: GithubSection,
    /// `[[publish]]`: the GitHub repository (and base branch) a repository publishes to.
    #[serde(default)]
    pub publish: Vec<PublishEntry>,
    /// `[telegram]`: the Telegram bot of `warden serve` (off without it).
    pub telegram: Option<TelegramSection>,
    /// `[slack]`: the Slack app of `warden serve` (off without it).
    pub slack: Option<SlackSection>,
    /// `[[mcp.servers]]`: MCP servers whose tools the agent may use, inside its sandbox.
    #[serde(default)]
    pub mcp: McpSection,
    /// `[maintain]`: candidate versions, the advisory database and the upgrade policy.
    #[serde(default)]
    pub maintain: MaintainSection,
    /// `[[schedules]]`: maintenance `warden serve` submits on a cron expression.
    #[serde(default)]
    pub schedules: Vec<ScheduleEntry>,
    /// `[telemetry]`: OpenTelemetry trace export (off without an endpoint).
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// `[gates]`: the risk gate's policy per level and the reviewer's.
    #[serde(default)]
    pub gates: GatesSection,
    /// `[roles]`: the models of the roles other than the implementer (the reviewer).
    #[serde(default)]
    pub roles: RolesSection,
}

impl FileConfig {
    /// Parses the text of a `warden.toml`.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|error| ConfigError::Invalid {
            message: error.to_string().trim_end().to_string(),
        })
    }
}

/// Why the configuration cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither `WARDEN_HOME` nor `HOME` is set.
    #[error("cannot find a state directory: set WARDEN_HOME")]
    NoStateDirectory,
    /// The file named (or found) cannot be read.
    #[error("cannot read configuration {}: {error}", path.display())]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The text is not TOML, or not the shape of a `warden.toml` (the message names the key).
    #[error("{message}")]
    Invalid { message: String },
    /// The file named (or found) is not a valid `warden.toml`.
    #[error("invalid configuration {}: {message}", path.display())]
    InvalidFile { path: PathBuf, message: String },
}

/// A `warden.toml` read (or its defaults, when there is none), with where it is.
#[derive(Debug, Default)]
pub struct ConfigFile {
    /// The state directory: `WARDEN_HOME`, else `~/.local/share/warden`.
    pub home: PathBuf,
    /// The file read, or where one would be read (`WARDEN_HOME/warden.toml` when none exists),
    /// so a message can say which file to edit.
    pub path: PathBuf,
    /// Its sections.
    pub sections: FileConfig,
}

impl ConfigFile {
    /// Reads `explicit`, else `WARDEN_CONFIG`, else `WARDEN_HOME/warden.toml` when it exists.
    pub fn load(explicit: Option<&Path>, env: &dyn Env) -> Result<ConfigFile, ConfigError> {
        let home = state_directory(env)?;
        let (path, read) = config_file(explicit, env, &home);
        let sections = match read {
            Some(path) => {
                let text =
                    std::fs::read_to_string(&path).map_err(|error| ConfigError::Unreadable {
                        path: path.clone(),
                        error,
                    })?;
                FileConfig::parse(&text).map_err(|error| ConfigError::InvalidFile {
                    path: path.clone(),
                    message: error.to_string(),
                })?
            }
            None => FileConfig::default(),
        };
        Ok(ConfigFile {
            home,
            path,
            sections,
        })
    }

    /// Defaults only, as if no file existed, under `home`.
    pub fn defaults(home: PathBuf) -> ConfigFile {
        ConfigFile {
            path: home.join("warden.toml"),
            home,
            sections: FileConfig::default(),
        }
    }

    /// The file `load` reads (or would read, when it does not exist).
    pub fn path_of(explicit: Option<&Path>, env: &dyn Env) -> Result<PathBuf, ConfigError> {
        Ok(config_file(explicit, env, &state_directory(env)?).0)
    }
}

/// `WARDEN_HOME`, else `~/.local/share/warden`.
fn state_directory(env: &dyn Env) -> Result<PathBuf, ConfigError> {
    match env.var("WARDEN_HOME") {
        Some(home) => Ok(PathBuf::from(home)),
        None => match env.var("HOME") {
            Some(user_home) => Ok(Path::new(&user_home).join(".local/share/warden")),
            None => Err(ConfigError::NoStateDirectory),
        },
    }
}

/// The configuration file named or defaulted, and the one to read (`None`: the default does
/// not exist, so every default applies).
fn config_file(explicit: Option<&Path>, env: &dyn Env, home: &Path) -> (PathBuf, Option<PathBuf>) {
    let named = explicit
        .map(Path::to_path_buf)
        .or_else(|| env.var("WARDEN_CONFIG").map(PathBuf::from));
    match named {
        Some(path) => (path.clone(), Some(path)),
        None => {
            let default = home.join("warden.toml");
            let read = default.exists().then(|| default.clone());
            (default, read)
        }
    }
}

/// The environment, read through a trait so tests can supply their own.
pub trait Env {
    /// The variable's value; `None` when unset or empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// This process's environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, String)>);

    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let error = FileConfig::parse("[model]\nnmae = \"faux\"\n").unwrap_err();
        assert!(error.to_string().contains("nmae"), "{error}");
        let error = FileConfig::parse("[telegarm]\n").unwrap_err();
        assert!(error.to_string().contains("telegarm"), "{error}");
    }

    #[test]
    fn the_file_is_named_explicitly_by_variable_or_found_in_home() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        let home = Vars(vec![("WARDEN_HOME", dir.display().to_string())]);
        let absent = ConfigFile::load(None, &home).unwrap();
        assert_eq!(absent.path, dir.join("warden.toml"));
        assert!(absent.sections.model.name.is_none());

        std::fs::write(dir.join("warden.toml"), "[model]\nname = \"faux\"\n").unwrap();
        let found = ConfigFile::load(None, &home).unwrap();
        assert_eq!(found.sections.model.name.as_deref(), Some("faux"));

        let other = dir.join("other.toml");
        std::fs::write(&other, "[limits]\nmax_turns = 3\n").unwrap();
        let by_variable = Vars(vec![
            ("WARDEN_HOME", dir.display().to_string()),
            ("WARDEN_CONFIG", other.display().to_string()),
        ]);
        let named = ConfigFile::load(None, &by_variable).unwrap();
        assert_eq!(
            (named.path.as_path(), named.sections.limits.max_turns),
            (other.as_path(), Some(3))
        );
        let explicit = ConfigFile::load(Some(&dir.join("warden.toml")), &by_variable).unwrap();
        assert_eq!(explicit.sections.model.name.as_deref(), Some("faux"));

        let missing = ConfigFile::load(Some(&dir.join("missing.toml")), &home).unwrap_err();
        assert!(
            matches!(missing, ConfigError::Unreadable { .. }),
            "{missing}"
        );
        std::fs::write(&other, "[limits]\nmax_turns = \"three\"\n").unwrap();
        let invalid = ConfigFile::load(Some(&other), &home).unwrap_err();
        assert!(
            invalid
                .to_string()
                .starts_with(&format!("invalid configuration {}", other.display())),
            "{invalid}"
        );
    }

    #[test]
    fn a_secret_written_in_the_file_is_never_shown() {
        let file =
            FileConfig::parse("[callbacks]\nsecret = \"hmac-key-in-the-file-0123456789abcdef\"\n")
                .unwrap();
        let shown = format!("{file:?}");
        assert!(!shown.contains("hmac-key-in-the-file"), "{shown}");
        assert!(shown.contains("secret: Some(\"***\")"), "{shown}");
    }

    #[test]
    fn without_warden_home_or_home_there_is_no_state_directory() {
        assert!(matches!(
            ConfigFile::load(None, &Vars(Vec::new())),
            Err(ConfigError::NoStateDirectory)
        ));
        let user = Vars(vec![("HOME", "/home/u".to_string())]);
        assert_eq!(
            ConfigFile::path_of(None, &user).unwrap(),
            Path::new("/home/u/.local/share/warden/warden.toml")
        );
    }
}
