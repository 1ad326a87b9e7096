//! Toolchains and dependency caches in the sandbox: the operator's read-only host mounts
//! (`[sandbox] mounts`, and per registered repository), the named presets
//! (`[sandbox] toolchains = ["rust", "node", "python", "go"]`) that expand to mounts and
//! environment, each repository's dependency cache under `WARDEN_HOME/caches/`, and the
//! `prepare` commands that fill it.
//!
//! **What the agent gets.** Mounts are read-only at their host paths; `PATH` gains their `bin`
//! directories; a preset's variables point the tools at the read-only toolchain and at the
//! repository's cache, which agent commands and checks see read-only too (they cannot poison
//! it for later tasks). Only `prepare` sees the cache writable. None of this opens a network;
//! the one exception is `prepare` (and only it, before any agent turn), which reaches the
//! registries on the egress allow-list through Warden's own proxy (`crate::egress`): each
//! preset brings its registries and, when the base tree has its lockfile and no `prepare` is
//! configured, a default prepare command that fills the cache (`cargo fetch --locked`, …).
//!
//! **Caches that cannot be poisoned.** A cache is keyed ([`cache_key`]) by everything that
//! could change what prepare writes: the repository, the toolchains, the prepare commands and
//! what they read of the base tree (the manifests and lockfiles for the presets' defaults, the
//! tree id for configured commands). Only the prepare of a key writes its cache, holding the
//! exclusive lock, and a `.complete` marker beside it publishes it when every command
//! succeeded; a complete cache is never written again and later tasks skip prepare. Readers
//! hold the lock shared until their task ends (`warden gc` skips a held cache). A task never
//! sees another's half-written cache: it gets one of its own instead ([`CacheState`]).
//!
//! **What is refused** (at configuration load for `warden.toml`, at registration for a
//! repository's mounts): relative paths and `..`, `/`, anything under `/proc`, `/sys`, `/dev`,
//! `/etc` or the working root, a path overlapping `WARDEN_HOME` (snapshots, scratch, caches,
//! the task store) and the Warden user's home itself or one of its parents (it holds
//! credentials).

use std::path::{Component, Path, PathBuf};
use warden_config::EgressSection;
use warden_config::Env;
use warden_sandbox::{Mount, WORKING_ROOT};

/// A named toolchain preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// rustup: `~/.rustup` and `~/.cargo/bin`.
    Rust,
    /// nvm's current node: `~/.nvm/versions/node/<version>` (or a system node).
    Node,
    /// pyenv's current python: `~/.pyenv/versions/<version>` (or the system python).
    Python,
    /// `GOROOT` or `/usr/local/go`.
    Go,
}

impl Preset {
    pub const ALL: [Preset; 4] = [Preset::Rust, Preset::Node, Preset::Python, Preset::Go];

    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Rust => "rust",
            Preset::Node => "node",
            Preset::Python => "python",
            Preset::Go => "go",
        }
    }

    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The registries this preset's package manager fetches from: its entries in the egress
    /// allow-list.
    pub fn registries(self) -> &'static [&'static str] {
        match self {
            // The sparse index, the download host and the API (`cargo` asks it for little,
            // but a `[registries]`-less project may).
            Preset::Rust => &["index.crates.io", "static.crates.io", "crates.io"],
            Preset::Node => &["registry.npmjs.org"],
            Preset::Go => &["proxy.golang.org", "sum.golang.org"],
            Preset::Python => &["pypi.org", "files.pythonhosted.org"],
        }
    }

    /// The variable naming the preset's folder of the dependency cache.
    pub fn cache_var(self) -> &'static str {
        match self {
            Preset::Rust => "CARGO_HOME",
            Preset::Node => "npm_config_cache",
            Preset::Python => "PIP_CACHE_DIR",
            Preset::Go => "GOMODCACHE",
        }
    }

    /// The prepare command run when no `prepare` is configured and the base tree has the
    /// lockfile: `(lockfile, command)`. Each fetches exactly what the lockfile pins into the
    /// repository's cache and builds or runs nothing of the project. Python has none: pip has
    /// no lockfile of its own.
    pub fn default_prepare(self) -> Option<(&'static str, &'static str)> {
        match self {
            Preset::Rust => Some(("Cargo.lock", "cargo fetch --locked")),
            Preset::Node => Some((
                "package-lock.json",
                "npm ci --ignore-scripts --no-audit --no-fund",
            )),
            Preset::Go => Some(("go.sum", "go mod download")),
            Preset::Python => None,
        }
    }

    /// Folders of the working root a warm seed keeps for the preset: `target` for Rust,
    /// whose cargo builds incrementally from it; `node_modules` for node, installed by
    /// [`Preset::warm_install`]. Go's build cache lives outside the tree: none.
    pub fn build_outputs(self) -> &'static [&'static str] {
        match self {
            Preset::Rust => &["target"],
            Preset::Node => &["node_modules"],
            Preset::Python | Preset::Go => &[],
        }
    }

    /// The lockfile and the command that install the packages the checks need into the tree,
    /// offline from the dependency cache, without running any package's scripts: the warm-up
    /// runs it before its check, so the seed carries `node_modules`. (npm cannot read a
    /// read-only cache — it rewrites an index bucket on every lookup and takes a failed write
    /// for a miss — so it reads a copy in the view's own `/tmp`.)
    pub fn warm_install(self) -> Option<(&'static str, &'static str)> {
        match self {
            Preset::Node => Some((
                "package-lock.json",
                "rm -rf /tmp/npm-cache && cp -R \"$npm_config_cache\" /tmp/npm-cache && \
                 npm_config_cache=/tmp/npm-cache npm ci --offline --ignore-scripts --no-audit \
                 --no-fund",
            )),
            Preset::Rust | Preset::Python | Preset::Go => None,
        }
    }

    /// The preset whose installation provides `program` (`cargo` → rust), for the fix of a
    /// program the sandbox cannot find.
    pub fn providing(program: &str) -> Option<Preset> {
        match program {
            "cargo" | "rustc" | "rustup" | "rustfmt" | "rustdoc" | "cargo-clippy"
            | "clippy-driver" => Some(Preset::Rust),
            "node" | "npm" | "npx" | "corepack" => Some(Preset::Node),
            "python" | "python3" | "pip" | "pip3" => Some(Preset::Python),
            "go" | "gofmt" => Some(Preset::Go),
            _ => None,
        }
    }
}

/// What to do about `program`, which the sandbox cannot find: the `[sandbox] toolchains` line
/// to add to `file` (the configured presets and the one that provides it) when a preset
/// provides it and is not configured yet, else the general sentence about mounts.
pub fn not_found_fix(program: &str, configured: &[Preset], file: &Path) -> String {
    match Preset::providing(program).filter(|preset| !configured.contains(preset)) {
        Some(preset) => {
            let names: Vec<String> = configured
                .iter()
                .chain(std::iter::once(&preset))
                .map(|p| format!("{:?}", p.as_str()))
                .collect();
            format!(
                "`{program}`: not found in the sandbox; add `toolchains = [{}]` under [sandbox] \
                 in {} (`warden doctor` shows the toolchains installed here)",
                names.join(", "),
                file.display()
            )
        }
        None => warden_tools::not_found_sentence(program),
    }
}

/// What to do when the checks fail because `program` (`cargo`, `npm`, `go`) cannot fetch a
/// dependency offline: the preset to add to `file` when it is not configured, else why its
/// prepare left the dependency out (`configured_prepare`: `[sandbox] prepare` replaces the
/// presets' defaults; `base` is the base tree, for its lockfile) and the setting that fixes it.
pub fn offline_fix(
    program: &str,
    configured: &[Preset],
    configured_prepare: bool,
    base: &Path,
    file: &Path,
) -> String {
    let file = file.display();
    let Some((preset, (lockfile, command))) =
        Preset::providing(program).and_then(|preset| Some((preset, preset.default_prepare()?)))
    else {
        return format!(
            "fetch the dependencies in a `[sandbox] prepare` command in {file}, with the \
             registry's host in `[egress] allow`"
        );
    };
    if !configured.contains(&preset) {
        let names: Vec<String> = configured
            .iter()
            .chain(std::iter::once(&preset))
            .map(|p| format!("{:?}", p.as_str()))
            .collect();
        format!(
            "add `toolchains = [{}]` under [sandbox] in {file}: with a committed {lockfile}, its \
             default prepare (`{command}`) fetches what the lockfile pins into the dependency \
             cache, through Warden's egress proxy, before the checks run",
            names.join(", ")
        )
    } else if configured_prepare {
        format!(
            "the `[sandbox] prepare` commands in {file} replace the {} preset's default \
             (`{command}`) and did not fetch it: fetch every dependency there, with any \
             registry besides the preset's in `[egress] allow`",
            preset.as_str()
        )
    } else if !base.join(lockfile).is_file() {
        format!(
            "the {} preset's default prepare (`{command}`) fetches what a committed {lockfile} \
             pins, and the base commit has none: commit {lockfile}, or fetch in `[sandbox] \
             prepare` in {file}",
            preset.as_str()
        )
    } else {
        format!(
            "{lockfile} pins it, but `{command}` did not fetch it (prepare's notices say why, \
             and the task's egress_connection events what was refused): a registry other than \
             the {} preset's needs its host in `[egress] allow` in {file}, one that resolves to \
             a private address here `[egress] allow_private`",
            preset.as_str()
        )
    }
}

/// What a preset, found on this machine, adds to the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PresetSetup {
    /// Read-only host directories.
    pub mounts: Vec<PathBuf>,
    /// Directories put in front of `PATH`.
    pub path: Vec<PathBuf>,
    /// Variables for every command.
    pub env: Vec<(String, String)>,
    /// Variables naming a folder of the repository's cache: `(variable, folder)`.
    pub cache_env: Vec<(String, String)>,
    /// Variables for agent commands and checks only (there is no network to fetch over).
    pub offline_env: Vec<(String, String)>,
    /// What was found, for `warden doctor`.
    pub found: String,
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The highest-sorting version directory in `dir` whose name starts with `prefix`.
fn newest_version(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut versions: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with(prefix) {
                return None;
            }
            let key = name
                .trim_start_matches('v')
                .split(|c: char| !c.is_ascii_digit())
                .map(|part| part.parse().unwrap_or(0))
                .collect();
            Some((key, entry.path()))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, path)| path)
}

/// The first line of a version file (`~/.nvm/alias/default`, `~/.pyenv/version`).
fn version_file(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let first = text.lines().next()?.trim().to_string();
    (!first.is_empty()).then_some(first)
}

/// Finds `preset` on this machine for the user whose home is `home`. `Err` says what is
/// missing, in one sentence.
pub fn detect(preset: Preset, home: &Path, env: &dyn Env) -> Result<PresetSetup, String> {
    let system = |program: &str| {
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(program))
            .find(|path| path.is_file())
    };
    match preset {
        Preset::Rust => {
            let rustup = env
                .var("RUSTUP_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".rustup"));
            let cargo_home = env
                .var("CARGO_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".cargo"));
            let bin = cargo_home.join("bin");
            if !bin.join("cargo").is_file() {
                return Err(format!(
                    "no rustup installation: {} does not exist (install rustup, or remove \
                     \"rust\" from [sandbox] toolchains)",
                    bin.join("cargo").display()
                ));
            }
            if !rustup.is_dir() {
                return Err(format!(
                    "no rustup installation: {} is not a directory",
                    rustup.display()
                ));
            }
            Ok(PresetSetup {
                found: format!("rustup at {} and {}", rustup.display(), bin.display()),
                mounts: vec![rustup.clone(), bin.clone()],
                path: vec![bin],
                env: vec![("RUSTUP_HOME".into(), text(&rustup))],
                cache_env: pairs(&[("CARGO_HOME", "cargo")]),
                offline_env: pairs(&[("CARGO_NET_OFFLINE", "true")]),
            })
        }
        Preset::Node => {
            let nvm = env
                .var("NVM_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".nvm"));
            let versions = nvm.join("versions/node");
            let wanted = version_file(&nvm.join("alias/default"))
                .map(|alias| {
                    let alias = alias.trim_start_matches('v').to_string();
                    format!("v{alias}")
                })
                .filter(|alias| {
                    alias.len() > 1 && alias[1..].starts_with(|c: char| c.is_ascii_digit())
                })
                .unwrap_or_else(|| "v".into());
            let cache = pairs(&[("npm_config_cache", "npm")]);
            // Offline the cache is read-only: npm's log files cannot be written there.
            let offline = pairs(&[("npm_config_offline", "true"), ("npm_config_logs_max", "0")]);
            match newest_version(&versions, &wanted).or_else(|| newest_version(&versions, "v")) {
                Some(dir) if dir.join("bin/node").is_file() => Ok(PresetSetup {
                    found: format!("nvm node {}", dir.display()),
                    mounts: vec![dir.clone()],
                    path: vec![dir.join("bin")],
                    env: Vec::new(),
                    cache_env: cache,
                    offline_env: offline,
                }),
                _ => match system("node") {
                    Some(node) => Ok(PresetSetup {
                        found: format!("system node {}", node.display()),
                        cache_env: cache,
                        offline_env: offline,
                        ..PresetSetup::default()
                    }),
                    None => Err(format!(
                        "no node: neither nvm ({}) nor a system node (install one, or remove \
                         \"node\" from [sandbox] toolchains)",
                        versions.display()
                    )),
                },
            }
        }
        Preset::Python => {
            let pyenv = env
                .var("PYENV_ROOT")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".pyenv"));
            let versions = pyenv.join("versions");
            let chosen = version_file(&pyenv.join("version"))
                .map(|v| versions.join(v))
                .filter(|dir| dir.is_dir())
                .or_else(|| newest_version(&versions, ""));
            let cache = pairs(&[("PIP_CACHE_DIR", "pip")]);
            match chosen {
                Some(dir) if dir.join("bin/python").exists() => Ok(PresetSetup {
                    found: format!("pyenv python {}", dir.display()),
                    mounts: vec![dir.clone()],
                    path: vec![dir.join("bin")],
                    cache_env: cache,
                    ..PresetSetup::default()
                }),
                _ => match system("python3") {
                    Some(python) => Ok(PresetSetup {
                        found: format!("system python {}", python.display()),
                        cache_env: cache,
                        ..PresetSetup::default()
                    }),
                    None => Err(format!(
                        "no python: neither pyenv ({}) nor a system python3 (install one, or \
                         remove \"python\" from [sandbox] toolchains)",
                        versions.display()
                    )),
                },
            }
        }
        Preset::Go => {
            // GOROOT, else the upstream tarball's place, else Debian's and Ubuntu's `golang-go`
            // (a symbolic link to the versioned directory, resolved so `VERSION` is read there).
            let goroot = env.var("GOROOT").map(PathBuf::from).unwrap_or_else(|| {
                GO_ROOTS
                    .iter()
                    .map(PathBuf::from)
                    .find(|root| root.join("bin/go").is_file())
                    .map(|root| root.canonicalize().unwrap_or(root))
                    .unwrap_or_else(|| PathBuf::from(GO_ROOTS[0]))
            });
            if !goroot.join("bin/go").is_file() {
                return Err(format!(
                    "no go: {} does not exist (set GOROOT, or remove \"go\" from [sandbox] \
                     toolchains)",
                    goroot.join("bin/go").display()
                ));
            }
            Ok(PresetSetup {
                found: format!("go at {}", goroot.display()),
                mounts: vec![goroot.clone()],
                path: vec![goroot.join("bin")],
                env: vec![
                    ("GOROOT".into(), text(&goroot)),
                    ("GOTOOLCHAIN".into(), "local".into()),
                    ("GOCACHE".into(), "/tmp/go-build".into()),
                ],
                cache_env: pairs(&[("GOMODCACHE", "go/mod")]),
                offline_env: pairs(&[("GOPROXY", "off"), ("GOFLAGS", "-mod=mod")]),
            })
        }
    }
}

/// Where a Go toolchain is looked for without `GOROOT`: the upstream tarball's place, then
/// Debian's and Ubuntu's `golang-go`.
const GO_ROOTS: [&str; 2] = ["/usr/local/go", "/usr/lib/go"];

/// `[sandbox]` toolchain settings, resolved: what every view and command gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toolchains {
    /// The presets named in `[sandbox] toolchains`.
    pub presets: Vec<Preset>,
    /// Read-only host directories (presets' and `[sandbox] mounts`), checked.
    pub mounts: Vec<PathBuf>,
    /// Directories put in front of the sandbox's `PATH`.
    pub path: Vec<PathBuf>,
    /// Variables for every command.
    pub env: Vec<(String, String)>,
    /// Variables naming a folder of the repository's cache.
    pub cache_env: Vec<(String, String)>,
    /// Variables for agent commands and checks only.
    pub offline_env: Vec<(String, String)>,
    /// `[sandbox] prepare`: commands run before the agent with the cache writable.
    pub prepare: Vec<String>,
    /// What prepare commands reach through Warden's egress proxy (the presets' registries,
    /// `[maintain]`'s and `[egress]`); nothing listed: prepare runs without network.
    pub egress: crate::egress::EgressSettings,
    /// The Warden user's home (`~` of per-repository mounts).
    pub user_home: Option<PathBuf>,
    /// `[sandbox] repo_mount_roots`, checked and resolved: a repository's own mounts must lie
    /// under one of them (none: repositories cannot add mounts). A registration API token is
    /// not the operator: it must not be able to show the server's keys to a sandbox.
    pub repo_mount_roots: Vec<PathBuf>,
}

/// The in-sandbox paths Warden builds itself: nothing is mounted over them.
const RESERVED: [&str; 5] = ["/proc", "/sys", "/dev", "/etc", WORKING_ROOT];

/// Refuses a `WARDEN_HOME` under a directory the sandbox builds itself (`/work`, `/etc`, …):
/// its dependency caches are shown to the views at their own paths, which such a view cannot
/// hold. Said up front, with the fix, rather than as a sandbox that cannot be established.
fn check_cache_home(warden_home: &Path) -> Result<(), String> {
    let canonical = warden_home
        .canonicalize()
        .unwrap_or_else(|_| warden_home.to_path_buf());
    for candidate in [warden_home, canonical.as_path()] {
        if let Some(reserved) = RESERVED.iter().find(|r| candidate.starts_with(r)) {
            return Err(format!(
                "WARDEN_HOME {} is under {reserved}, which the sandbox builds itself, so the \
                 dependency caches under it cannot be shown to checks: move WARDEN_HOME \
                 elsewhere (for example ~/.local/share/warden)",
                warden_home.display()
            ));
        }
    }
    Ok(())
}

/// Expands `~` against `home` and checks a mount path (see the module documentation).
/// `warden_home` is `WARDEN_HOME`, when known.
pub fn check_mount(
    raw: &str,
    home: Option<&Path>,
    warden_home: Option<&Path>,
) -> Result<PathBuf, String> {
    let path = match raw.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match home {
            Some(home) => home.join(rest.trim_start_matches('/')),
            None => return Err(format!("mount {raw:?}: HOME is not set to expand ~")),
        },
        Some(_) => return Err(format!("mount {raw:?}: only ~ and ~/… are expanded")),
        None => PathBuf::from(raw),
    };
    let shown = path.display();
    let normal = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !normal {
        return Err(format!(
            "mount {raw:?} must be an absolute path (or start with ~/) without '.' or '..'"
        ));
    }
    let canonical = path
        .canonicalize()
        .map_err(|e| format!("mount {shown}: {e}"))?;
    if !canonical.is_dir() {
        return Err(format!("mount {shown} is not a directory"));
    }
    let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    for candidate in [&path, &canonical] {
        if candidate.parent().is_none() {
            return Err(format!(
                "mount {shown} would show the whole host file system"
            ));
        }
        if let Some(reserved) = RESERVED.iter().find(|r| candidate.starts_with(r)) {
            return Err(format!(
                "mount {shown} is under {reserved}, which the sandbox builds itself"
            ));
        }
        if let Some(home) = home {
            if home.starts_with(candidate) {
                return Err(format!(
                    "mount {shown} would show the whole home directory {} (keys, \
                     credentials); mount the toolchain's own directories",
                    home.display()
                ));
            }
        }
        if let Some(warden_home) = warden_home {
            let warden = warden_home
                .canonicalize()
                .unwrap_or_else(|_| warden_home.to_path_buf());
            if overlaps(candidate, warden_home) || overlaps(candidate, &warden) {
                return Err(format!(
                    "mount {shown} overlaps WARDEN_HOME ({}), which holds snapshots, scratch \
                     directories, caches and the task store",
                    warden_home.display()
                ));
            }
        }
    }
    Ok(path)
}

/// Refuses a repository's own mount (already [`check_mount`]ed) that is not under one of
/// `roots` (`[sandbox] repo_mount_roots`, canonical).
pub fn check_repo_mount(roots: &[PathBuf], checked: &Path) -> Result<(), String> {
    let canonical = checked
        .canonicalize()
        .map_err(|e| format!("mount {}: {e}", checked.display()))?;
    if roots.iter().any(|root| canonical.starts_with(root)) {
        return Ok(());
    }
    Err(format!(
        "mount {} is not under [sandbox] repo_mount_roots in warden.toml; the operator lists \
         there the directories repositories may mount",
        checked.display()
    ))
}

/// Checks `[sandbox] prepare_proxy`: `host:port` with a port, normalized (lowercase host,
/// IPv6 literals in brackets).
pub fn check_prepare_proxy(raw: &str) -> anyhow::Result<String> {
    check_proxy_address("sandbox.prepare_proxy", raw)
}

/// Checks a proxy address setting `key`: `host:port` with a port, normalized.
fn check_proxy_address(key: &str, raw: &str) -> anyhow::Result<String> {
    let authority = crate::authority::parse_authority(raw)
        .filter(|authority| authority.port.is_some_and(|port| port != 0) && raw.trim() == raw);
    match authority {
        Some(crate::authority::Authority {
            host,
            port: Some(port),
        }) => Ok(format!("{host}:{port}")),
        _ => anyhow::bail!(
            "{key} must be host:port, the address of an HTTP proxy such as squid (got {raw:?})"
        ),
    }
}

/// Adds `mount` unless a listed one holds it; drops listed ones it holds.
fn add_mount(mounts: &mut Vec<PathBuf>, mount: PathBuf) {
    if mounts.iter().any(|m| mount.starts_with(m)) {
        return;
    }
    mounts.retain(|m| !m.starts_with(&mount));
    mounts.push(mount);
}

/// The `bin` directory a mount contributes to `PATH`: itself when named `bin`, else its `bin`
/// folder when it has one.
fn bin_of(mount: &Path) -> Option<PathBuf> {
    if mount.file_name().is_some_and(|name| name == "bin") {
        Some(mount.to_path_buf())
    } else {
        Some(mount.join("bin")).filter(|bin| bin.is_dir())
    }
}

impl Toolchains {
    /// Resolves `[sandbox] toolchains`, `mounts` and `prepare`.
    pub fn resolve(
        toolchains: &[String],
        mounts: &[String],
        prepare: &[String],
        warden_home: &Path,
        env: &dyn Env,
    ) -> anyhow::Result<Toolchains> {
        let home = env.var("HOME").map(PathBuf::from);
        let mut resolved = Toolchains {
            user_home: home.clone(),
            ..Toolchains::default()
        };
        for name in toolchains {
            let preset = Preset::from_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "sandbox.toolchains: unknown toolchain {name:?}: expected rust, node, python \
                     or go"
                )
            })?;
            if resolved.presets.contains(&preset) {
                continue;
            }
            let Some(home) = home.as_deref() else {
                anyhow::bail!("sandbox.toolchains: HOME is not set to find {name:?}");
            };
            let setup = detect(preset, home, env)
                .map_err(|reason| anyhow::anyhow!("sandbox.toolchains: {name}: {reason}"))?;
            for mount in &setup.mounts {
                let checked = check_mount(&text(mount), Some(home), Some(warden_home))
                    .map_err(|reason| anyhow::anyhow!("sandbox.toolchains: {name}: {reason}"))?;
                add_mount(&mut resolved.mounts, checked);
            }
            resolved.presets.push(preset);
            resolved.path.extend(setup.path);
            resolved.env.extend(setup.env);
            resolved.cache_env.extend(setup.cache_env);
            resolved.offline_env.extend(setup.offline_env);
        }
        for raw in mounts {
            let checked = check_mount(raw, home.as_deref(), Some(warden_home))
                .map_err(|reason| anyhow::anyhow!("sandbox.mounts: {reason}"))?;
            if let Some(bin) = bin_of(&checked) {
                if !resolved.path.contains(&bin) {
                    resolved.path.push(bin);
                }
            }
            add_mount(&mut resolved.mounts, checked);
        }
        if let Some(empty) = prepare.iter().find(|c| c.trim().is_empty()) {
            anyhow::bail!("sandbox.prepare: empty command {empty:?}");
        }
        resolved.prepare = prepare.to_vec();
        Ok(resolved)
    }

    /// Adds `[sandbox] repo_mount_roots` (each checked like a mount).
    pub fn with_repo_mount_roots(
        mut self,
        roots: &[String],
        warden_home: &Path,
        env: &dyn Env,
    ) -> anyhow::Result<Toolchains> {
        let home = env.var("HOME").map(PathBuf::from);
        for raw in roots {
            let checked = check_mount(raw, home.as_deref(), Some(warden_home))
                .map_err(|reason| anyhow::anyhow!("sandbox.repo_mount_roots: {reason}"))?;
            let canonical = checked.canonicalize().unwrap_or(checked);
            self.repo_mount_roots.push(canonical);
        }
        Ok(self)
    }

    /// Adds the egress allow-list: the presets' registries and `registries` (`[maintain]`'s
    /// URLs, each with the preset whose package manager reads it, admitted with that preset)
    /// unless `[egress] presets = false`, then `[egress] allow` and `allow_private`,
    /// checked; the upstream is `[egress] upstream` or (the older name) `[sandbox]
    /// prepare_proxy`.
    pub fn with_egress(
        mut self,
        section: &EgressSection,
        prepare_proxy: Option<&str>,
        registries: &[(Preset, &str)],
    ) -> anyhow::Result<Toolchains> {
        use crate::egress::HostRule;
        let mut egress = crate::egress::EgressSettings::default();
        if section.presets.unwrap_or(true) {
            for preset in &self.presets {
                for host in preset.registries() {
                    egress.add(HostRule::parse(host, false).map_err(anyhow::Error::msg)?);
                }
            }
            // A registry named by URL; one that is an address is the operator's to list
            // under allow_private.
            let used = registries
                .iter()
                .filter(|(preset, _)| self.presets.contains(preset))
                .map(|(_, url)| url);
            for url in used {
                let authority = url
                    .split_once("://")
                    .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
                if let Some(Ok(rule)) = authority.map(|a| HostRule::parse(a, false)) {
                    egress.add(rule);
                }
            }
        }
        for raw in &section.allow {
            egress.add(
                HostRule::parse(raw, false).map_err(|e| anyhow::anyhow!("egress.allow: {e}"))?,
            );
        }
        for raw in &section.allow_private {
            let rule = HostRule::parse(raw, true)
                .map_err(|e| anyhow::anyhow!("egress.allow_private: {e}"))?;
            if !egress.allow_private.contains(&rule) {
                egress.allow_private.push(rule);
            }
        }
        egress.upstream = match (&section.upstream, prepare_proxy) {
            (Some(_), Some(_)) => anyhow::bail!(
                "egress.upstream and sandbox.prepare_proxy are both set; keep egress.upstream \
                 (prepare_proxy is its older name)"
            ),
            (Some(upstream), None) => Some(check_proxy_address("egress.upstream", upstream)?),
            (None, Some(proxy)) => Some(check_prepare_proxy(proxy)?),
            (None, None) => None,
        };
        // npm keys its cache by the registry: prepare, checks and agent commands all name the
        // one `[maintain] npm_registry` sets, and none asks the registry whether npm is
        // current (the update notifier would be refused by the egress proxy, or fail offline).
        if let Some((_, url)) = registries
            .iter()
            .find(|(preset, _)| *preset == Preset::Node && self.presets.contains(preset))
        {
            for (name, value) in [
                ("npm_config_registry", *url),
                ("npm_config_update_notifier", "false"),
            ] {
                if !self.env.iter().any(|(n, _)| n == name) {
                    self.env.push((name.to_string(), value.to_string()));
                }
            }
        }
        if let Some(mib) = section.max_mib {
            if mib == 0 {
                anyhow::bail!("egress.max_mib must be at least 1");
            }
            egress.max_bytes = mib
                .checked_mul(1 << 20)
                .ok_or_else(|| anyhow::anyhow!("egress.max_mib {mib} is too large"))?;
        }
        self.egress = egress;
        Ok(self)
    }

    /// Refuses a repository's own mount that is not under `[sandbox] repo_mount_roots`.
    pub fn check_repo_mount(&self, checked: &Path) -> Result<(), String> {
        check_repo_mount(&self.repo_mount_roots, checked)
    }

    /// What one task's sandbox gets for `repo_name`'s repository: these settings plus the
    /// repository's own mounts and prepare commands (which replace `[sandbox] prepare`), and
    /// its cache directory under `warden_home`.
    pub fn for_repo(
        &self,
        warden_home: &Path,
        cache_key: &str,
        repo_mounts: &[String],
        repo_prepare: &[String],
    ) -> Result<TaskToolchains, String> {
        let home = self.user_home.clone();
        let mut mounts = self.mounts.clone();
        let mut path = self.path.clone();
        for raw in repo_mounts {
            let checked = check_mount(raw, home.as_deref(), Some(warden_home))?;
            self.check_repo_mount(&checked)?;
            if let Some(bin) = bin_of(&checked) {
                if !path.contains(&bin) {
                    path.push(bin);
                }
            }
            add_mount(&mut mounts, checked);
        }
        let cache =
            (!self.cache_env.is_empty() || !repo_prepare.is_empty() || !self.prepare.is_empty())
                .then(|| warden_home.join("caches").join(cache_key));
        if cache.is_some() {
            check_cache_home(warden_home)?;
        }
        Ok(TaskToolchains {
            mounts,
            path,
            env: self.env.clone(),
            cache_env: match &cache {
                Some(dir) => self
                    .cache_env
                    .iter()
                    .map(|(name, folder)| (name.clone(), text(&dir.join(folder))))
                    .collect(),
                None => Vec::new(),
            },
            offline_env: self.offline_env.clone(),
            shared_cache: cache.clone(),
            cache,
            cache_moved: false,
            other_caches: Vec::new(),
            prepare: if repo_prepare.is_empty() {
                self.prepare.clone()
            } else {
                repo_prepare.to_vec()
            },
            egress: self.egress.clone(),
            presets: self.presets.clone(),
            lease: CacheHold::default(),
        })
    }
}

/// One task's toolchains: mounts, environment, cache and prepare commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskToolchains {
    pub mounts: Vec<PathBuf>,
    pub path: Vec<PathBuf>,
    pub env: Vec<(String, String)>,
    /// Cache variables with their absolute directories.
    pub cache_env: Vec<(String, String)>,
    pub offline_env: Vec<(String, String)>,
    /// The repository's cache directory, when anything uses one.
    pub cache: Option<PathBuf>,
    /// The key's shared cache directory (`cache` until a private one replaces it): warm
    /// seeds are named after it.
    pub shared_cache: Option<PathBuf>,
    /// A private `cache` is shown in the views at `shared_cache`'s path (and the cache
    /// variables name that path), so what tools record of absolute paths (cargo's
    /// fingerprints hash each registry crate's source path) is the same as with the shared
    /// cache, and a warm seed built against it holds ([`warden_sandbox::Mount::source`]).
    pub cache_moved: bool,
    /// A multi-repository task's other repositories' caches that some cache variable names
    /// ([`TaskToolchains::take_variables_from`]), each under its own key and held like
    /// `cache`: shown read-only.
    pub other_caches: Vec<(PathBuf, CacheHold)>,
    pub prepare: Vec<String>,
    /// What prepare reaches through Warden's egress proxy (global: a registered repository
    /// cannot widen it).
    pub egress: crate::egress::EgressSettings,
    /// The presets in use (their default prepare commands).
    pub presets: Vec<Preset>,
    /// The task's hold on its cache, once [`TaskToolchains::open_cache`] took it.
    pub lease: CacheHold,
}

impl TaskToolchains {
    /// Takes the task's dependency cache (private to the Warden user) and creates its folders:
    /// the key's complete cache when there is one (read-only, prepare skipped); else, when
    /// the task `fill`s it and nobody else holds it, the key's cache emptied and held
    /// exclusively for this task's prepare ([`TaskToolchains::finish_fill`] publishes it);
    /// else (or `private`) a cache of this task alone, removed when it ends: shown at the
    /// key's path when `private` and `at_key_path` (a backend that moves mounts,
    /// [`warden_sandbox::Sandbox::moves_mounts`]), else at its own. The lease is held until
    /// the last clone of these toolchains is dropped.
    pub fn open_cache(
        &mut self,
        fill: bool,
        private: bool,
        at_key_path: bool,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let Some(shared) = self.cache.clone() else {
            return Ok(());
        };
        let taken = match private {
            true => None,
            false => Some(CacheLease::take(&shared, fill, false)?)
                .and_then(|(lease, taken)| taken.then_some(lease)),
        };
        let lease = if let Some(lease) = taken {
            lease
        } else {
            static PRIVATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = PRIVATE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!(
                "{}-task-{}-{n}",
                shared.file_name().unwrap_or_default().to_string_lossy(),
                std::process::id()
            );
            let own = shared.with_file_name(name);
            self.cache_moved = private && at_key_path;
            if !self.cache_moved {
                for (_, value) in &mut self.cache_env {
                    if let Ok(rest) = Path::new(value.as_str()).strip_prefix(&shared) {
                        *value = text(&own.join(rest));
                    }
                }
            }
            self.cache = Some(own.clone());
            CacheLease::take(&own, fill, true)?.0
        };
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        if lease.state() != CacheState::Complete {
            for (_, dir) in &self.cache_env {
                builder.create(self.host_path(Path::new(dir)))?;
            }
        }
        self.lease = CacheHold(Some(std::sync::Arc::new(lease)));
        Ok(())
    }

    /// Where the views see the cache: the key's path when [`TaskToolchains::cache_moved`].
    pub fn cache_in_view(&self) -> Option<&PathBuf> {
        match self.cache_moved {
            true => self.shared_cache.as_ref(),
            false => self.cache.as_ref(),
        }
    }

    /// The host path of `path` as the views see it (under a moved cache: in the task's own).
    fn host_path(&self, path: &Path) -> PathBuf {
        match (self.cache_moved, &self.shared_cache, &self.cache) {
            (true, Some(shared), Some(own)) => match path.strip_prefix(shared) {
                Ok(rest) => own.join(rest),
                Err(_) => path.to_path_buf(),
            },
            _ => path.to_path_buf(),
        }
    }

    /// The key's shared cache, taken as a change task takes it ([`TaskToolchains::open_cache`]
    /// with `fill`, not private): what a maintenance task, whose own cache is private, builds
    /// the base tree's warm seed against. Its views show it at the path where these
    /// toolchains' moved cache is shown, so both give commands the same environment.
    pub fn key_cache(&self, fill: bool) -> std::io::Result<TaskToolchains> {
        let mut key = self.clone();
        key.lease = CacheHold::default();
        if let (Some(shared), Some(own)) = (&self.shared_cache, &self.cache) {
            if !self.cache_moved {
                for (_, value) in &mut key.cache_env {
                    if let Ok(rest) = Path::new(value.as_str()).strip_prefix(own) {
                        *value = text(&shared.join(rest));
                    }
                }
            }
            key.cache = Some(shared.clone());
        }
        key.cache_moved = false;
        key.open_cache(fill, false, false)?;
        Ok(key)
    }

    /// Copies what the cache `from` holds (the key's complete cache) into this task's own,
    /// files with their modes and modification times: a maintenance task starts from the
    /// base's dependencies without fetching them again, and writes what it fetches only here.
    pub fn copy_cache_from(&self, from: &TaskToolchains) -> std::io::Result<()> {
        let (Some(source), Some(own)) = (&from.cache, &self.cache) else {
            return Ok(());
        };
        if source == own {
            return Ok(());
        }
        let entries: Vec<String> = std::fs::read_dir(source)?
            .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()?;
        warden_tools::checks::harvest_outputs(source, &entries, own)
    }

    /// Names `variables` (cache variables) after `other`'s cache instead of this one's: a
    /// multi-repository task's package manager of a repository other than the first finds
    /// that repository's own keyed cache. `other` is opened already; its hold is kept.
    pub fn take_variables_from(&mut self, other: &TaskToolchains, variables: &[&str]) {
        let Some(cache) = &other.cache else {
            return;
        };
        for (name, value) in &mut self.cache_env {
            if let Some((_, theirs)) = other
                .cache_env
                .iter()
                .find(|(n, _)| variables.contains(&n.as_str()) && n == name)
            {
                value.clone_from(theirs);
            }
        }
        if !self.other_caches.iter().any(|(dir, _)| dir == cache)
            && self.cache.as_ref() != Some(cache)
        {
            self.other_caches.push((cache.clone(), other.lease.clone()));
        }
    }

    /// How the task holds its cache (`None`: no cache, or not opened).
    pub fn cache_state(&self) -> Option<CacheState> {
        self.lease.0.as_ref().map(|lease| lease.state())
    }

    /// Ends this task's fill of its key's cache: published when `complete`, otherwise kept
    /// for this task alone (see [`CacheLease::finish`]). Nothing for any other state.
    pub fn finish_fill(&self, complete: bool) -> std::io::Result<()> {
        match &self.lease.0 {
            Some(lease) => lease.finish(complete),
            None => Ok(()),
        }
    }

    /// The warm seed of `checks_hash` ([`warden_tools::checks::check_config_hash`]) on the
    /// base `tree` at `root`, when a preset has build outputs ([`Preset::build_outputs`]) the
    /// base tree does not hold itself: `<key>-warm-<digest>` beside the dependency cache,
    /// taken like it ([`CacheLease`]). The key's complete seed is used as it is; an incomplete
    /// one is this task's to fill only when `fill` and the task builds against the key's
    /// complete dependency cache (not a private one: maintenance, or a fill that failed).
    /// `None`: nothing to keep warm, or another task is filling it.
    pub fn warm_build(
        &self,
        checks_hash: &str,
        tree: &str,
        root: &Path,
        fill: bool,
    ) -> std::io::Result<Option<warden_tools::checks::WarmBuild>> {
        use sha2::{Digest, Sha256};
        let Some(shared) = &self.shared_cache else {
            return Ok(None);
        };
        let is_file = |name: &str| {
            root.join(name)
                .symlink_metadata()
                .is_ok_and(|meta| meta.is_file())
        };
        // A preset that installs first counts only when the base has the lockfile it needs.
        let presets: Vec<Preset> = self
            .presets
            .iter()
            .copied()
            .filter(|preset| {
                preset
                    .warm_install()
                    .is_none_or(|(lockfile, _)| is_file(lockfile))
            })
            .collect();
        let outputs: Vec<String> = presets
            .iter()
            .flat_map(|preset| preset.build_outputs())
            .filter(|output| root.join(output).symlink_metadata().is_err())
            .map(|output| output.to_string())
            .collect();
        if outputs.is_empty() {
            return Ok(None);
        }
        let install: Vec<String> = presets
            .iter()
            .filter_map(|preset| Some(preset.warm_install()?.1.to_string()))
            .collect();
        let mut hash = Sha256::new();
        for field in [checks_hash, tree]
            .into_iter()
            .chain(outputs.iter().map(String::as_str))
        {
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field.as_bytes());
        }
        let digest = hex::encode(hash.finalize());
        let mut name = shared.file_name().unwrap_or_default().to_owned();
        name.push(format!("-warm-{}", &digest[..24]));
        let seed = shared.with_file_name(name);
        let may_fill = fill
            && self.cache.as_ref() == Some(shared)
            && self.cache_state() == Some(CacheState::Complete);
        let (lease, taken) = CacheLease::take(&seed, may_fill, false)?;
        let fill = match lease.state() {
            CacheState::Complete => None,
            CacheState::Filling if taken => {
                let lease = std::sync::Arc::new(lease);
                let filling = lease.clone();
                let finish: warden_tools::checks::FinishFill =
                    std::sync::Arc::new(move |complete| filling.finish(complete));
                return Ok(Some(warden_tools::checks::WarmBuild {
                    seed,
                    outputs,
                    install,
                    fill: Some(finish),
                    hold: lease,
                }));
            }
            _ => return Ok(None),
        };
        Ok(Some(warden_tools::checks::WarmBuild {
            seed,
            outputs,
            install,
            fill,
            hold: std::sync::Arc::new(lease),
        }))
    }

    /// The presets' default prepare commands for the base tree at `root` (each whose lockfile
    /// the tree has), when no prepare command is configured.
    pub fn default_prepare(&self, root: &Path) -> Vec<(Preset, &'static str)> {
        if !self.prepare.is_empty() {
            return Vec::new();
        }
        self.presets
            .iter()
            .filter_map(|preset| Some((*preset, preset.default_prepare()?)))
            .filter(|(_, (lockfile, _))| {
                root.join(lockfile)
                    .symlink_metadata()
                    .is_ok_and(|meta| meta.is_file())
            })
            .map(|(preset, (_, command))| (preset, command))
            .collect()
    }

    /// The view's mounts: the toolchains read-only, the cache read-only or (`prepare`)
    /// writable.
    pub fn mounts(&self, cache_writable: bool) -> Vec<Mount> {
        let mut mounts: Vec<Mount> = self.mounts.iter().map(Mount::read_only).collect();
        if let (Some(cache), Some(shown)) = (&self.cache, self.cache_in_view()) {
            mounts.push(Mount {
                path: shown.clone(),
                writable: cache_writable,
                source: (cache != shown).then(|| cache.clone()),
            });
        }
        mounts.extend(
            self.other_caches
                .iter()
                .map(|(dir, _)| Mount::read_only(dir)),
        );
        mounts
    }

    /// The environment of a command: the sandbox's baseline with `PATH` extended, the
    /// presets' variables, the cache variables (`WARDEN_CACHE` is the cache itself) and (agent
    /// commands and checks) the offline switches.
    pub fn command_env(&self, offline: bool) -> Vec<(String, String)> {
        let mut env = warden_sandbox::baseline_env();
        if let Some((_, value)) = env.iter_mut().find(|(name, _)| name == "PATH") {
            let mut parts: Vec<String> = self.path.iter().map(|p| text(p)).collect();
            parts.push(value.clone());
            *value = parts.join(":");
        }
        let cache = self
            .cache_in_view()
            .map(|dir| ("WARDEN_CACHE".to_string(), text(dir)));
        let extra = self
            .env
            .iter()
            .chain(cache.as_ref())
            .chain(&self.cache_env)
            .chain(offline.then_some(&self.offline_env).into_iter().flatten());
        for (name, value) in extra {
            match env.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = value.clone(),
                None => env.push((name.clone(), value.clone())),
            }
        }
        env
    }
}

/// The proxy variables of a prepare command whose view relays to the proxy at `address`
/// (`host:port` as the command dials it): `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and their
/// lowercase forms, all `http://<address>`.
pub fn proxy_env(address: &str) -> Vec<(String, String)> {
    let url = format!("http://{address}");
    [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|name| (name.to_string(), url.clone()))
    .collect()
}

/// The lock file of a dependency cache: `<cache>.lock` beside it, out of `prepare`'s reach
/// (prepare runs repository code with the cache writable, which must not be able to swap the
/// lock for a fifo or a symlink the host opens). Readers hold it shared, the prepare filling
/// the cache exclusively; its modification time is the cache's last use.
fn open_cache_lock(cache: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        sibling(cache, "lock").as_path(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(
            "the cache lock is not a regular file",
        ));
    }
    Ok(file)
}

/// `<cache>.<suffix>`, beside the cache.
fn sibling(cache: &Path, suffix: &str) -> PathBuf {
    let mut name = cache.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// The marker of a complete cache, `<cache>.complete`, written beside it (out of `prepare`'s
/// reach) when every prepare command of its key succeeded; `warden gc` removes it first.
pub fn complete_marker(cache: &Path) -> PathBuf {
    sibling(cache, "complete")
}

/// Removes `path` (a file or a tree, symbolic links not followed), first making read-only
/// directories writable again (Go's module cache is read-only). Absent is fine.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fn make_writable(dir: &Path) -> std::io::Result<()> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                make_writable(&entry.path())?;
            }
        }
        Ok(())
    }
    let meta = match path.symlink_metadata() {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        make_writable(path)?;
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// How a task holds its dependency cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheState {
    /// The key's complete cache, read-only to everything of the task: prepare is skipped.
    Complete,
    /// The key's cache, emptied and held exclusively: this task's prepare fills it and
    /// publishes it when every command succeeds.
    Filling,
    /// Held shared after a fill that did not complete: this task's own, never published.
    Unpublished,
    /// A cache of this task alone (`<key>-task-<n>`), removed when the task ends: the key's
    /// cache was incomplete and in another task's hands, or the task is maintenance (whose
    /// upgraded packages belong to no base lockfile).
    Private,
}

/// A task's hold on its dependency cache: the lock (shared, or exclusive while filling) kept
/// until the task ends, so `warden gc` cannot evict a cache in use.
#[derive(Debug)]
pub struct CacheLease {
    lock: std::fs::File,
    cache: PathBuf,
    state: std::sync::Mutex<CacheState>,
}

impl CacheLease {
    /// Takes `cache` for a task (see [`TaskToolchains::open_cache`]).
    fn take(cache: &Path, fill: bool, private: bool) -> std::io::Result<(CacheLease, bool)> {
        use rustix::fs::{flock, FlockOperation};
        use std::os::unix::fs::DirBuilderExt;
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        if let Some(parent) = cache.parent() {
            builder.create(parent)?;
        }
        let lock = open_cache_lock(cache)?;
        let lease = |lock, state| CacheLease {
            lock,
            cache: cache.to_path_buf(),
            state: std::sync::Mutex::new(state),
        };
        if private {
            flock(&lock, FlockOperation::LockShared)?;
            let _ = lock.set_modified(std::time::SystemTime::now());
            remove_tree(cache)?;
            builder.create(cache)?;
            return Ok((lease(lock, CacheState::Private), true));
        }
        // Waits for a prepare filling it (bounded by the prepare timeout) or an eviction.
        flock(&lock, FlockOperation::LockShared)?;
        let _ = lock.set_modified(std::time::SystemTime::now());
        if complete_marker(cache).is_file() && cache.is_dir() {
            return Ok((lease(lock, CacheState::Complete), true));
        }
        // Incomplete: filled by nobody now, left over by a failed or interrupted prepare, or
        // held by a task whose prepare failed. Only a task that can fill it, alone, takes it.
        if fill && flock(&lock, FlockOperation::NonBlockingLockExclusive).is_ok() {
            if complete_marker(cache).is_file() && cache.is_dir() {
                flock(&lock, FlockOperation::LockShared)?;
                return Ok((lease(lock, CacheState::Complete), true));
            }
            remove_tree(cache)?;
            builder.create(cache)?;
            return Ok((lease(lock, CacheState::Filling), true));
        }
        Ok((lease(lock, CacheState::Unpublished), false))
    }

    pub fn state(&self) -> CacheState {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends a fill: publishes the cache when `complete` (the marker written beside it, then
    /// the lock downgraded to shared: from then on nothing writes it); otherwise it stays this
    /// task's, held shared, and the next task that fills it empties it first.
    pub fn finish(&self, complete: bool) -> std::io::Result<()> {
        use rustix::fs::{flock, FlockOperation};
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *state != CacheState::Filling {
            return Ok(());
        }
        if complete {
            let marker = std::fs::File::create(complete_marker(&self.cache))?;
            marker.sync_all()?;
        }
        flock(&self.lock, FlockOperation::LockShared)?;
        *state = if complete {
            CacheState::Complete
        } else {
            CacheState::Unpublished
        };
        Ok(())
    }
}

impl Drop for CacheLease {
    fn drop(&mut self) {
        if self.state() == CacheState::Private {
            let _ = remove_tree(&self.cache);
            let _ = std::fs::remove_file(complete_marker(&self.cache));
            // Nobody else knows its name: the lock file goes too.
            let _ = std::fs::remove_file(sibling(&self.cache, "lock"));
        }
    }
}

/// The lease a task's toolchains carry (shared by their clones); compares equal always.
#[derive(Debug, Clone, Default)]
pub struct CacheHold(Option<std::sync::Arc<CacheLease>>);

impl PartialEq for CacheHold {
    fn eq(&self, _: &CacheHold) -> bool {
        true
    }
}

impl Eq for CacheHold {}

/// What a dependency cache's key digests: `repo` (the mirror's name, kept readable in front),
/// the toolchains (presets, mounts, `PATH`, variables), the prepare commands, and what they
/// read: configured commands see the whole base tree, so its tree id (`tree`); the presets'
/// default commands see only the manifests and lockfiles, so those files' paths and bytes in
/// the base tree at `root`. Two tasks share a cache only when everything that could change
/// what their prepare writes is the same.
pub fn cache_key(
    toolchains: &Toolchains,
    repo: &str,
    prepare: &[String],
    tree: &str,
    root: &Path,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    field(b"warden-dependency-cache-1");
    field(repo.as_bytes());
    for preset in &toolchains.presets {
        field(preset.as_str().as_bytes());
    }
    for path in toolchains.mounts.iter().chain(&toolchains.path) {
        field(path.as_os_str().as_encoded_bytes());
    }
    for (name, value) in toolchains.env.iter().chain(&toolchains.cache_env) {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    let prepare = if prepare.is_empty() {
        &toolchains.prepare
    } else {
        prepare
    };
    if prepare.is_empty() {
        field(b"defaults");
        let mut files = Vec::new();
        manifest_files(root, Path::new(""), &toolchains.presets, &mut files);
        files.sort();
        for relative in files {
            field(relative.as_os_str().as_encoded_bytes());
            field(&std::fs::read(root.join(&relative)).unwrap_or_default());
        }
    } else {
        field(b"configured");
        for command in prepare {
            field(command.as_bytes());
        }
        field(tree.as_bytes());
    }
    let digest = hex::encode(hash.finalize());
    let safe: String = repo
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' => c,
            _ => '_',
        })
        .collect();
    format!("{safe}-{}", &digest[..32])
}

/// The manifests (anywhere) and lockfiles (at the root) of `presets` under `root/relative`,
/// outside `.git` and `node_modules`: what the presets' default prepare commands read.
fn manifest_files(root: &Path, relative: &Path, presets: &[Preset], found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(relative)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let path = relative.join(&name);
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if name != ".git" && name != "node_modules" {
                manifest_files(root, &path, presets, found);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let at_root = relative.as_os_str().is_empty();
        let name = name.to_string_lossy();
        let wanted = presets.iter().any(|preset| match preset {
            Preset::Rust => name == "Cargo.toml" || (at_root && name == "Cargo.lock"),
            Preset::Node => {
                name == "package.json"
                    || (at_root && (name == "package-lock.json" || name == "npm-shrinkwrap.json"))
            }
            Preset::Go => {
                name == "go.mod"
                    || (at_root && matches!(&*name, "go.sum" | "go.work" | "go.work.sum"))
            }
            Preset::Python => false,
        });
        if wanted {
            found.push(path);
        }
    }
}

/// A registered repository's own sandbox settings (`warden repos add --mount/--prepare`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoSandbox {
    /// Host directories shown read-only, on top of `[sandbox] mounts`.
    pub mounts: Vec<String>,
    /// Commands replacing `[sandbox] prepare` for this repository.
    pub prepare: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warden_home_under_a_directory_the_sandbox_builds_is_refused_with_the_fix() {
        let refused = check_cache_home(Path::new("/work/team/home")).unwrap_err();
        assert!(
            refused.contains("WARDEN_HOME /work/team/home is under /work"),
            "{refused}"
        );
        assert!(refused.contains("move WARDEN_HOME elsewhere"), "{refused}");
        assert!(check_cache_home(Path::new("/etc/warden")).is_err());
        assert!(check_cache_home(Path::new("/var/lib/warden")).is_ok());
        // Only whole components: /workspace is not /work.
        assert!(check_cache_home(Path::new("/workspace/home")).is_ok());
    }
    use std::collections::HashMap;

    struct MapEnv(HashMap<String, String>);
    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
    }

    fn env(home: &Path) -> MapEnv {
        MapEnv(HashMap::from([("HOME".to_string(), text(home))]))
    }

    fn fake_rustup(home: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(home.join(".rustup/toolchains")).unwrap();
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        let cargo = home.join(".cargo/bin/cargo");
        std::fs::write(&cargo, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_missing_program_a_preset_provides_names_the_exact_line_and_file() {
        let file = Path::new("/home/u/.local/share/warden/warden.toml");
        assert_eq!(
            not_found_fix("cargo", &[], file),
            "`cargo`: not found in the sandbox; add `toolchains = [\"rust\"]` under [sandbox] in \
             /home/u/.local/share/warden/warden.toml (`warden doctor` shows the toolchains \
             installed here)"
        );
        // The line keeps the presets already configured.
        assert!(not_found_fix("npm", &[Preset::Rust], file)
            .contains("add `toolchains = [\"rust\", \"node\"]` under [sandbox]"));
        // A configured preset that still does not provide it, or a program no preset
        // provides: the general sentence.
        assert_eq!(
            not_found_fix("cargo", &[Preset::Rust], file),
            warden_tools::not_found_sentence("cargo")
        );
        assert_eq!(
            not_found_fix("make", &[], file),
            warden_tools::not_found_sentence("make")
        );
    }

    #[test]
    fn a_repository_mounts_only_under_the_operators_roots() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let warden = dir.path().join("warden");
        let ssh = home.join(".ssh");
        let tools = dir.path().join("opt/tools/go");
        for d in [&ssh, &tools, &warden] {
            std::fs::create_dir_all(d).unwrap();
        }
        let none = Toolchains::resolve(&[], &[], &[], &warden, &env(&home)).unwrap();
        let error = none
            .for_repo(&warden, "app", &["~/.ssh".into()], &[])
            .unwrap_err();
        assert!(error.contains("repo_mount_roots"), "{error}");
        let rooted = none
            .clone()
            .with_repo_mount_roots(&[text(&dir.path().join("opt/tools"))], &warden, &env(&home))
            .unwrap();
        assert!(rooted
            .for_repo(&warden, "app", &[text(&tools)], &[])
            .is_ok());
        assert!(rooted
            .for_repo(&warden, "app", &["~/.ssh".into()], &[])
            .is_err());
    }

    fn task_with_cache(warden: &Path, key: &str) -> TaskToolchains {
        Toolchains {
            cache_env: pairs(&[("CARGO_HOME", "cargo")]),
            ..Toolchains::default()
        }
        .for_repo(warden, key, &[], &[])
        .unwrap()
    }

    #[test]
    fn the_cache_lock_lives_beside_the_cache_and_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let mut task = task_with_cache(dir.path(), "app");
        task.open_cache(true, false, false).unwrap();
        assert!(dir.path().join("caches/app.lock").is_file());
        assert!(!dir.path().join("caches/app/.prepare.lock").exists());
        drop(task);
        // A symlink planted where the lock goes is refused, not followed.
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join("caches/other.lock")).unwrap();
        assert!(task_with_cache(dir.path(), "other")
            .open_cache(true, false, false)
            .is_err());
        assert!(!target.exists());
    }

    #[test]
    fn a_warm_seed_is_filled_only_against_the_keys_complete_cache_and_used_by_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let rust = |key: &str| {
            let mut task = task_with_cache(dir.path(), key);
            task.presets = vec![Preset::Rust, Preset::Node];
            task
        };
        // The key's dependency cache, complete.
        let mut filler = rust("app-k");
        filler.open_cache(true, false, false).unwrap();
        filler.finish_fill(true).unwrap();
        // Node's outputs need its lockfile in the base: without one, only Rust's count.
        let warm = filler
            .warm_build("sha256:checks", "tree-1", base.path(), true)
            .unwrap()
            .expect("a seed to fill");
        assert_eq!(warm.outputs, ["target"]);
        assert!(warm.install.is_empty());
        assert!(warm.fill.is_some());
        let seed = warm.seed.clone();
        assert!(seed.starts_with(dir.path().join("caches")));
        assert!(seed.to_string_lossy().contains("app-k-warm-"));
        // Another task meanwhile waits for the fill, then uses the seed as it is.
        let mut other = rust("app-k");
        other.open_cache(true, false, false).unwrap();
        let waiting = {
            let other = other.clone();
            let base = base.path().to_path_buf();
            std::thread::spawn(move || {
                other
                    .warm_build("sha256:checks", "tree-1", &base, true)
                    .unwrap()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiting.is_finished(), "took a seed being filled");
        std::fs::create_dir_all(seed.join("target/debug")).unwrap();
        (warm.fill.as_ref().unwrap())(true).unwrap();
        assert!(complete_marker(&seed).is_file());
        let waited = waiting.join().unwrap().expect("the complete seed");
        assert_eq!(waited.seed, seed);
        assert!(waited.fill.is_none());
        // Complete: used as it is by a maintenance task's private cache too, never refilled.
        let mut maintain = rust("app-k");
        maintain.open_cache(true, true, false).unwrap();
        let used = maintain
            .warm_build("sha256:checks", "tree-1", base.path(), false)
            .unwrap()
            .expect("the complete seed");
        assert_eq!(used.seed, seed);
        assert!(used.fill.is_none());
        // Another base tree or other checks: another seed, and a private cache fills none.
        assert!(maintain
            .warm_build("sha256:checks", "tree-2", base.path(), true)
            .unwrap()
            .is_none());
        let next = other
            .warm_build("sha256:other-checks", "tree-1", base.path(), true)
            .unwrap()
            .expect("a seed of other checks");
        assert_ne!(next.seed, seed);
        // With the lockfile, node's packages are installed first and kept too.
        std::fs::write(base.path().join("package-lock.json"), "{}").unwrap();
        let both = other
            .warm_build("sha256:checks", "tree-3", base.path(), true)
            .unwrap()
            .expect("a seed with node_modules");
        assert_eq!(both.outputs, ["target", "node_modules"]);
        assert_eq!(both.install.len(), 1);
        assert!(both.install[0].contains("npm ci --offline --ignore-scripts"));
        // A base that holds `target` itself gets no seed of it.
        std::fs::create_dir(base.path().join("target")).unwrap();
        let held = other
            .warm_build("sha256:checks", "tree-4", base.path(), true)
            .unwrap()
            .expect("node's seed");
        assert_eq!(held.outputs, ["node_modules"]);
    }

    #[test]
    fn only_a_complete_fill_is_shared_and_nothing_writes_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("caches/app-k");
        // The first task takes the key's cache to fill; a second one meanwhile gets its own.
        let mut first = task_with_cache(dir.path(), "app-k");
        first.open_cache(true, false, false).unwrap();
        assert_eq!(first.cache_state(), Some(CacheState::Filling));
        assert_eq!(first.cache.as_deref(), Some(shared.as_path()));
        std::fs::write(shared.join("cargo/half"), "written").unwrap();
        // The second waits for the fill; this one fails and stays the first task's.
        let warden = dir.path().to_path_buf();
        let second = std::thread::spawn(move || {
            let mut second = task_with_cache(&warden, "app-k");
            second.open_cache(true, false, false).unwrap();
            second
        });
        first.finish_fill(false).unwrap();
        assert_eq!(first.cache_state(), Some(CacheState::Unpublished));
        assert!(!complete_marker(&shared).exists());
        let second = second.join().unwrap();
        assert_eq!(second.cache_state(), Some(CacheState::Private));
        let own = second.cache.clone().unwrap();
        assert_ne!(own, shared);
        assert!(own.join("cargo").is_dir());
        assert!(
            !own.join("cargo/half").exists(),
            "a half-written cache is never seen"
        );
        assert!(second
            .command_env(true)
            .contains(&("CARGO_HOME".into(), text(&own.join("cargo")))));
        drop(second);
        assert!(!own.exists(), "a private cache goes with its task");

        // The next filler empties it first. (A process another test forks holds a copy of the
        // lock's file description until it execs, the descriptor being close-on-exec: the lock
        // can outlive `first` by that long, and a task opening meanwhile gets a private cache.
        // Production is fine with that; the test waits it out.)
        assert!(shared.join("cargo/half").exists());
        drop(first);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let third = loop {
            let mut third = task_with_cache(dir.path(), "app-k");
            third.open_cache(true, false, false).unwrap();
            if third.cache_state() == Some(CacheState::Filling)
                || std::time::Instant::now() > deadline
            {
                break third;
            }
            drop(third);
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(third.cache_state(), Some(CacheState::Filling));
        assert!(!shared.join("cargo/half").exists());
        std::fs::write(shared.join("cargo/crate"), "fetched").unwrap();
        third.finish_fill(true).unwrap();
        assert!(complete_marker(&shared).is_file());

        // Complete: shared by every later task of the key, read-only (not opened to fill).
        let mut fourth = task_with_cache(dir.path(), "app-k");
        fourth.open_cache(true, false, false).unwrap();
        assert_eq!(fourth.cache_state(), Some(CacheState::Complete));
        assert_eq!(fourth.cache.as_deref(), Some(shared.as_path()));
        fourth.finish_fill(false).unwrap();
        assert!(complete_marker(&shared).is_file());
        assert_eq!(
            std::fs::read_to_string(shared.join("cargo/crate")).unwrap(),
            "fetched"
        );
        // A task that does not fill (a question) never sees an incomplete one.
        let mut reader = task_with_cache(dir.path(), "app-other");
        reader.open_cache(false, false, false).unwrap();
        assert_eq!(reader.cache_state(), Some(CacheState::Private));
        // Maintenance's is always its own.
        let mut maintain = task_with_cache(dir.path(), "app-k");
        maintain.open_cache(true, true, false).unwrap();
        assert_eq!(maintain.cache_state(), Some(CacheState::Private));
        assert_ne!(maintain.cache.as_deref(), Some(shared.as_path()));
        drop((third, fourth));
    }

    #[test]
    fn the_cache_key_follows_what_prepare_reads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("Cargo.toml"), "[package]").unwrap();
        std::fs::write(root.join("Cargo.lock"), "version = 3").unwrap();
        std::fs::write(root.join("main.rs"), "fn main() {}").unwrap();
        let rust = Toolchains {
            presets: vec![Preset::Rust],
            ..Toolchains::default()
        };
        let key = |toolchains: &Toolchains, prepare: &[String], tree: &str| {
            cache_key(toolchains, "app/1", prepare, tree, root)
        };
        let base = key(&rust, &[], "t1");
        assert!(base.starts_with("app_1-"), "{base}");
        // Default prepare: the manifests and lockfile, not the sources nor the commit.
        assert_eq!(key(&rust, &[], "t2"), base);
        std::fs::write(root.join("main.rs"), "fn main() { planted() }").unwrap();
        std::fs::create_dir_all(root.join(".cargo")).unwrap();
        std::fs::write(root.join(".cargo/config.toml"), "[source]").unwrap();
        assert_eq!(key(&rust, &[], "t1"), base);
        std::fs::write(root.join("Cargo.lock"), "version = 4").unwrap();
        let relocked = key(&rust, &[], "t1");
        assert_ne!(relocked, base);
        std::fs::create_dir_all(root.join("member")).unwrap();
        std::fs::write(root.join("member/Cargo.toml"), "[package]").unwrap();
        assert_ne!(key(&rust, &[], "t1"), relocked);
        // Configured commands see the whole tree: keyed by it, and by the commands.
        let configured = key(&rust, &["make deps".into()], "t1");
        assert_ne!(configured, key(&rust, &["make deps".into()], "t2"));
        assert_ne!(configured, key(&rust, &["make all".into()], "t1"));
        // And by the toolchains.
        assert_ne!(
            key(&Toolchains::default(), &[], "t1"),
            key(&rust, &[], "t1")
        );
    }

    #[test]
    fn mounts_are_checked_and_expanded() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let warden = home.join(".local/share/warden");
        std::fs::create_dir_all(warden.join("snapshots")).unwrap();
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        let check = |raw: &str| check_mount(raw, Some(&home), Some(&warden));
        assert_eq!(check("~/.cargo/bin").unwrap(), home.join(".cargo/bin"));
        for (raw, expect) in [
            ("/", "whole host"),
            ("~", "whole home directory"),
            (&*text(dir.path()), "whole home directory"),
            ("~/.local/share/warden", "WARDEN_HOME"),
            ("~/.local/share/warden/snapshots", "WARDEN_HOME"),
            ("~/.local", "WARDEN_HOME"),
            ("/proc/self", "/proc"),
            ("/sys", "/sys"),
            ("/dev", "/dev"),
            ("/etc/ssl", "/etc"),
            ("relative", "absolute"),
            ("~/.cargo/../.cargo", "'..'"),
            ("~other/x", "only ~"),
            ("~/.missing", "No such file"),
        ] {
            let error = check(raw).unwrap_err();
            assert!(error.contains(expect), "{raw}: {error}");
        }
    }

    #[test]
    fn presets_expand_to_mounts_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        fake_rustup(&home);
        let warden = dir.path().join("warden");
        let resolved = Toolchains::resolve(
            &["rust".into()],
            &["~/.cargo/bin".into()],
            &["cargo fetch".into()],
            &warden,
            &env(&home),
        )
        .unwrap();
        assert_eq!(
            resolved.mounts,
            vec![home.join(".rustup"), home.join(".cargo/bin")]
        );
        assert_eq!(resolved.path, vec![home.join(".cargo/bin")]);
        let task = resolved.for_repo(&warden, "app-1234", &[], &[]).unwrap();
        let cache = warden.join("caches/app-1234");
        assert_eq!(task.cache.as_deref(), Some(cache.as_path()));
        assert_eq!(task.prepare, vec!["cargo fetch".to_string()]);
        let command = task.command_env(true);
        let get = |name: &str| {
            command
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert!(get("PATH")
            .unwrap()
            .starts_with(&format!("{}:", home.join(".cargo/bin").display())));
        assert_eq!(get("RUSTUP_HOME"), Some(text(&home.join(".rustup"))));
        assert_eq!(get("CARGO_HOME"), Some(text(&cache.join("cargo"))));
        assert_eq!(get("CARGO_NET_OFFLINE").as_deref(), Some("true"));
        assert_eq!(
            task.command_env(false)
                .iter()
                .find(|(n, _)| n == "CARGO_NET_OFFLINE"),
            None
        );
        let mounts = task.mounts(false);
        assert!(mounts.iter().all(|m| !m.writable));
        assert!(task
            .mounts(true)
            .iter()
            .any(|m| m.writable && m.path == cache));
    }

    #[test]
    fn the_prepare_proxy_is_host_and_port() {
        let check = |raw: &str| check_prepare_proxy(raw).map_err(|e| e.to_string());
        assert_eq!(check("Squid.Internal:3128").unwrap(), "squid.internal:3128");
        assert_eq!(check("10.0.0.5:8080").unwrap(), "10.0.0.5:8080");
        assert_eq!(check("[::1]:3128").unwrap(), "[::1]:3128");
        for bad in [
            "squid",
            "squid:0",
            "http://squid:3128",
            "squid:3128/",
            " squid:3128",
            ":3128",
            "squid:99999",
        ] {
            let error = check(bad).unwrap_err();
            assert!(error.contains("must be host:port"), "{bad}: {error}");
        }
        let env = proxy_env("127.0.0.1:3128");
        for name in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
            assert!(
                env.contains(&(name.to_string(), "http://127.0.0.1:3128".to_string())),
                "{name}"
            );
        }
    }

    #[test]
    fn unknown_or_missing_toolchains_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let resolve = |names: &[&str]| {
            Toolchains::resolve(
                &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &[],
                &[],
                &dir.path().join("warden"),
                &env(&home),
            )
            .map_err(|e| e.to_string())
        };
        assert!(resolve(&["ruby"])
            .unwrap_err()
            .contains("unknown toolchain"));
        assert!(resolve(&["rust"]).unwrap_err().contains("no rustup"));
    }

    #[test]
    fn the_egress_allow_list_is_the_presets_registries_and_the_operators_hosts() {
        let with = |presets: Vec<Preset>, section: EgressSection, proxy: Option<&str>| {
            Toolchains {
                presets,
                ..Toolchains::default()
            }
            .with_egress(
                &section,
                proxy,
                &[
                    (Preset::Rust, "https://index.crates.io"),
                    (Preset::Node, "http://npm.corp.example:4873/"),
                ],
            )
            .map(|t| t.egress)
            .map_err(|e| e.to_string())
        };
        let rust = with(vec![Preset::Rust], EgressSection::default(), None).unwrap();
        assert_eq!(
            rust.describe(),
            "index.crates.io, static.crates.io, crates.io"
        );
        // `[maintain]`'s registry comes with its preset only.
        let node = with(vec![Preset::Node], EgressSection::default(), None).unwrap();
        assert_eq!(node.describe(), "registry.npmjs.org, npm.corp.example:4873");
        assert!(!with(vec![], EgressSection::default(), None)
            .unwrap()
            .admits_anything());
        let own = EgressSection {
            allow: vec!["*.pkg.example".into()],
            allow_private: vec!["10.0.0.5:8081".into()],
            presets: Some(false),
            upstream: Some("Squid.Internal:3128".into()),
            max_mib: Some(10),
        };
        let own = with(vec![Preset::Rust], own, None).unwrap();
        assert_eq!(
            own.describe(),
            "*.pkg.example, 10.0.0.5:8081 (private); through the upstream proxy \
             squid.internal:3128"
        );
        assert_eq!(own.max_bytes, 10 << 20);
        // The older key is the upstream too; both at once is an error.
        let older = with(vec![], EgressSection::default(), Some("squid:3128")).unwrap();
        assert_eq!(older.upstream.as_deref(), Some("squid:3128"));
        let both = EgressSection {
            upstream: Some("a:1".into()),
            ..EgressSection::default()
        };
        assert!(with(vec![], both, Some("b:2"))
            .unwrap_err()
            .contains("both set"));
        for (section, expect) in [
            (
                EgressSection {
                    allow: vec!["10.0.0.5".into()],
                    ..EgressSection::default()
                },
                "egress.allow: egress host \"10.0.0.5\": an IP address is admitted only under \
                 [egress] allow_private",
            ),
            (
                EgressSection {
                    allow: vec!["https://x.example".into()],
                    ..EgressSection::default()
                },
                "egress.allow: egress host \"https://x.example\": expected a host name",
            ),
            (
                EgressSection {
                    max_mib: Some(0),
                    ..EgressSection::default()
                },
                "egress.max_mib must be at least 1",
            ),
            (
                EgressSection {
                    upstream: Some("http://squid:3128".into()),
                    ..EgressSection::default()
                },
                "egress.upstream must be host:port",
            ),
        ] {
            let error = with(vec![], section, None).unwrap_err();
            assert!(error.starts_with(expect), "{error}");
        }
    }
}

#[cfg(test)]
mod offline_fix_tests {
    use super::{offline_fix, Preset};
    use std::path::Path;

    #[test]
    fn the_fix_names_the_setting_for_what_is_missing() {
        let base = tempfile::tempdir().unwrap();
        let file = Path::new("/etc/warden/config.toml");
        // No rust preset: add it (the default prepare fetches the lockfile's crates).
        let fix = offline_fix("cargo", &[Preset::Node], false, base.path(), file);
        assert!(fix.contains("toolchains = [\"node\", \"rust\"]"), "{fix}");
        assert!(fix.contains("cargo fetch --locked"), "{fix}");
        assert!(fix.contains("/etc/warden/config.toml"), "{fix}");
        // The preset, no lockfile: commit one.
        let fix = offline_fix("cargo", &[Preset::Rust], false, base.path(), file);
        assert!(fix.contains("commit Cargo.lock"), "{fix}");
        // The preset and a lockfile: another registry needs [egress] allow.
        std::fs::write(base.path().join("Cargo.lock"), "version = 3\n").unwrap();
        let fix = offline_fix("cargo", &[Preset::Rust], false, base.path(), file);
        assert!(fix.contains("[egress] allow"), "{fix}");
        // Configured prepare commands replace the default.
        let fix = offline_fix("cargo", &[Preset::Rust], true, base.path(), file);
        assert!(fix.contains("`[sandbox] prepare`"), "{fix}");
        let fix = offline_fix("npm", &[], false, base.path(), file);
        assert!(fix.contains("toolchains = [\"node\"]"), "{fix}");
        assert!(fix.contains("package-lock.json"), "{fix}");
        let fix = offline_fix("go", &[Preset::Go], false, base.path(), file);
        assert!(fix.contains("commit go.sum"), "{fix}");
    }
}
