//! `RepoSpec`: parses the `PATH[@REV]` / `URL[@REV]` argument of `--repo` (SPEC §2) into a
//! source, an optional revision and a repository name, refusing anything that could be read by git
//! as an option or a transport other than the allowed ones.

use std::path::{Path, PathBuf};

use crate::error::{redact_credentials, RepoError};

/// Where a repository comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A local repository: an absolute, canonical path.
    Path(PathBuf),
    /// A git URL (`https://`, `ssh://`, `file://` or scp-like `user@host:path`).
    Url(String),
}

impl Source {
    /// The source for people and stored records: the path, or the URL with any credentials
    /// replaced.
    pub fn display_redacted(&self) -> String {
        redact_credentials(&self.as_text())
    }

    /// The source as text: the path or the URL (with any credentials it carries).
    pub(crate) fn as_text(&self) -> String {
        match self {
            Source::Path(path) => path.to_string_lossy().into_owned(),
            Source::Url(url) => url.clone(),
        }
    }
}

/// A parsed `--repo` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSpec {
    pub source: Source,
    /// The revision after `@`; `None` means the source's `HEAD`, [`WORK_TREE_REV`] a snapshot
    /// of a local repository's work tree.
    pub rev: Option<String>,
    /// The repository name: the last path component without `.git`.
    pub name: String,
    /// The directory the argument named when it lies inside the repository at `source` (a
    /// local path below the top level): the whole repository is used, and callers say so.
    pub within: Option<PathBuf>,
}

/// The revision `PATH@worktree` asks for: the work tree as it is, uncommitted and untracked
/// files included (a branch literally named `worktree` is `@refs/heads/worktree`).
pub const WORK_TREE_REV: &str = "worktree";

/// `path` without `.` components and with each `..` taking the component before it, as people
/// read a path (no file system access: the path need not exist).
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    normal.push("..");
                }
            }
            other => normal.push(other.as_os_str()),
        }
    }
    normal
}

/// URL schemes git is allowed to use (the transport allow-list in `git.rs` matches).
const ALLOWED_SCHEMES: [&str; 5] = ["https", "ssh", "git+ssh", "ssh+git", "file"];

impl RepoSpec {
    /// Parses `PATH[@REV]` or `URL[@REV]`; relative paths are taken from `cwd`.
    pub fn parse(text: &str, cwd: &Path) -> Result<RepoSpec, RepoError> {
        let invalid = |reason: String| RepoError::InvalidSpec {
            spec: redact_credentials(text),
            reason,
        };
        if text.is_empty() {
            return Err(invalid("it is empty".into()));
        }
        if text.chars().any(char::is_control) {
            return Err(invalid("it contains control characters".into()));
        }
        let kind = classify(text);
        if kind == Kind::Local {
            let whole = cwd.join(text);
            if whole.exists() {
                return RepoSpec::local(&whole, None).map_err(invalid);
            }
        }
        let (location, rev) = split_rev(text, kind);
        if let Some(rev) = rev {
            validate_rev(rev).map_err(invalid)?;
        }
        let rev = rev.map(str::to_string);
        match kind {
            Kind::Local => {
                let path = cwd.join(location);
                if !path.exists() {
                    return Err(invalid(format!(
                        "no such path {}",
                        lexically_normal(&path).to_string_lossy()
                    )));
                }
                RepoSpec::local(&path, rev).map_err(invalid)
            }
            Kind::SchemeUrl | Kind::ScpLike => {
                validate_url(location, kind).map_err(invalid)?;
                let name = name_from(url_path(location, kind)).map_err(invalid)?;
                Ok(RepoSpec {
                    source: Source::Url(location.to_string()),
                    rev,
                    name,
                    within: None,
                })
            }
        }
    }

    /// Whether this asks for a snapshot of the work tree (`PATH@worktree`).
    pub fn wants_work_tree(&self) -> bool {
        self.rev.as_deref() == Some(WORK_TREE_REV)
    }

    fn local(path: &Path, rev: Option<String>) -> Result<RepoSpec, String> {
        let given = path
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
        if !given.is_dir() {
            return Err(format!("{} is not a directory", given.display()));
        }
        // A directory inside a repository means that repository, as git reads it.
        let canonical = enclosing_repository(&given).unwrap_or_else(|| given.clone());
        let within = (canonical != given).then_some(given);
        // `repo/.git` names the repository `repo`, not `.git`.
        let named = if canonical.file_name().is_some_and(|n| n == ".git") {
            canonical.parent().unwrap_or(&canonical)
        } else {
            &canonical
        };
        let last = named
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("cannot derive a repository name from {}", named.display()))?;
        let name = name_from(last)?;
        Ok(RepoSpec {
            source: Source::Path(canonical),
            rev,
            name,
            within,
        })
    }
}

/// The repository `dir` belongs to, found the way git discovers it: the nearest of `dir` and
/// its parents that has a `.git` (a git directory, or a `gitdir:` file of a linked work tree)
/// or is itself a git directory (a bare repository). `None`: no repository encloses `dir`.
///
/// Like git, the search does not cross into another filesystem, and a repository found above
/// `dir` that someone else owns is not taken (git's `safe.directory` rule): another user's
/// `/tmp/.git` cannot become the repository of `--repo /tmp/mine`.
fn enclosing_repository(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir).ok()?.dev();
    let me = rustix::process::geteuid().as_raw();
    for candidate in dir.ancestors() {
        let Ok(meta) = std::fs::metadata(candidate) else {
            return None;
        };
        if meta.dev() != device {
            return None;
        }
        let dot_git = candidate.join(".git");
        let has_dot_git = if dot_git.is_dir() {
            is_git_dir(&dot_git)
        } else {
            std::fs::read(&dot_git).is_ok_and(|text| text.starts_with(b"gitdir:"))
        };
        if has_dot_git || is_git_dir(candidate) {
            let owner = std::fs::symlink_metadata(if has_dot_git { &dot_git } else { candidate })
                .map(|m| m.uid())
                .ok()?;
            return (candidate == dir || owner == me).then(|| candidate.to_path_buf());
        }
    }
    None
}

/// Whether `dir` looks like a git directory to git: a `HEAD`, and objects of its own or of the
/// repository it shares them with (`commondir`).
fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && (dir.join("objects").is_dir() || dir.join("commondir").is_file())
}

/// Whether git may push to `remote`, a URL or a path (a relative one taken from `base`): one of
/// the transports Warden allows, or a directory that exists. `Err` says why not.
pub fn check_push_target(remote: &str, base: &Path) -> Result<(), String> {
    if remote.chars().any(char::is_control) {
        return Err("it contains control characters".into());
    }
    match classify(remote) {
        Kind::Local => {
            let path = base.join(remote);
            if path.is_dir() {
                Ok(())
            } else {
                Err(format!("{} is not a directory", path.display()))
            }
        }
        kind => validate_url(remote, kind),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `scheme://...`
    SchemeUrl,
    /// `[user@]host:path`, git's rule: a `:` before any `/`.
    ScpLike,
    Local,
}

fn classify(text: &str) -> Kind {
    if let Some(pos) = text.find("://") {
        let scheme = &text[..pos];
        let is_scheme = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if is_scheme {
            return Kind::SchemeUrl;
        }
    }
    match (text.find(':'), text.find('/')) {
        (Some(colon), Some(slash)) if colon < slash => Kind::ScpLike,
        (Some(_), None) => Kind::ScpLike,
        _ => Kind::Local,
    }
}

/// Splits off `@REV` at the last `@` allowed for the kind. An `@` followed by `{` belongs to a
/// reflog expression (`main@{1}`), never a separator.
fn split_rev(text: &str, kind: Kind) -> (&str, Option<&str>) {
    let earliest = match kind {
        Kind::SchemeUrl => text
            .find("://")
            .and_then(|pos| text[pos + 3..].find('/').map(|slash| pos + 3 + slash))
            .unwrap_or(text.len()),
        Kind::ScpLike => text.find(':').unwrap_or(text.len()),
        Kind::Local => 0,
    };
    let separator = text
        .char_indices()
        .rev()
        .find(|&(i, c)| c == '@' && i > earliest && !text[i + 1..].starts_with('{'))
        .map(|(i, _)| i);
    match separator {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    }
}

fn validate_rev(rev: &str) -> Result<(), String> {
    if rev.is_empty() {
        return Err("the revision after `@` is empty".into());
    }
    if rev.starts_with('-') {
        return Err(format!("revision {rev:?} starts with `-`"));
    }
    if rev.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("revision {rev:?} contains whitespace"));
    }
    if rev.contains("..") {
        return Err(format!("revision {rev:?} is a range; name a single commit"));
    }
    if rev.contains(':') || rev.contains('\\') {
        return Err(format!("revision {rev:?} is not a commit name"));
    }
    Ok(())
}

fn validate_url(url: &str, kind: Kind) -> Result<(), String> {
    if url.starts_with('-') {
        return Err("a url must not start with `-`".into());
    }
    if url.chars().any(char::is_whitespace) {
        return Err("a url must not contain whitespace".into());
    }
    match kind {
        Kind::SchemeUrl => {
            let scheme = url
                .split("://")
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            if !ALLOWED_SCHEMES.contains(&scheme.as_str()) {
                return Err(format!(
                    "url scheme {scheme:?} is not allowed; use https, ssh or file"
                ));
            }
            let rest = &url[scheme.len() + 3..];
            let host = authority_host(rest.split('/').next().unwrap_or_default());
            if scheme != "file" && host.is_empty() {
                return Err("the url has no host".into());
            }
            if host.starts_with('-') {
                return Err("a host must not start with `-`".into());
            }
        }
        Kind::ScpLike => {
            let (host_part, _) = url.split_once(':').unwrap_or((url, ""));
            let host = host_part.rsplit_once('@').map_or(host_part, |(_, h)| h);
            if host.is_empty() || host.starts_with('-') {
                return Err(format!("{host:?} is not a usable ssh host"));
            }
            // `transport::address` would pick a remote helper, which is never allowed.
            if url.contains("::") {
                return Err("remote-helper urls (`transport::address`) are not allowed".into());
            }
        }
        Kind::Local => {}
    }
    Ok(())
}

/// The host of `[user@]host[:port]`.
fn authority_host(authority: &str) -> &str {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.starts_with('[') {
        return host_port.split(']').next().map_or("", |h| &h[1..]);
    }
    host_port.split(':').next().unwrap_or_default()
}

/// The path part of a URL (without query or fragment).
fn url_path(url: &str, kind: Kind) -> &str {
    let path = match kind {
        Kind::SchemeUrl => url
            .find("://")
            .map(|pos| &url[pos + 3..])
            .and_then(|rest| rest.find('/').map(|slash| &rest[slash..]))
            .unwrap_or(""),
        Kind::ScpLike => url.split_once(':').map_or("", |(_, path)| path),
        Kind::Local => url,
    };
    path.split(['?', '#']).next().unwrap_or_default()
}

/// The repository name from a path: last non-empty component, `.git` suffix removed, restricted
/// to `[A-Za-z0-9._-]+` and not `.`, `..` or `.git`.
fn name_from(path: &str) -> Result<String, String> {
    let last = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let name = last.strip_suffix(".git").unwrap_or(last);
    if name.is_empty() {
        return Err("cannot derive a repository name from it".into());
    }
    let valid = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !valid || matches!(name, "." | ".." | ".git") {
        return Err(format!(
            "repository name {name:?} must match [A-Za-z0-9._-]+ and not be `.`, `..` or `.git`"
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        for sub in [
            "app",
            "app/.git",
            "srv/lib.git",
            "odd@name",
            "with@v1",
            "sp ace",
            "x",
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Fixture { dir }
    }

    impl Fixture {
        fn root(&self) -> PathBuf {
            self.dir.path().canonicalize().unwrap()
        }
    }

    enum Expect<'a> {
        Path(&'a str, Option<&'a str>, &'a str),
        Url(&'a str, Option<&'a str>, &'a str),
        Err(&'a str),
    }

    fn check(fixture: &Fixture, input: &str, expect: Expect<'_>) {
        let cwd = fixture.root();
        let got = RepoSpec::parse(input, &cwd);
        match expect {
            Expect::Path(rel, rev, name) => {
                let spec = got.unwrap_or_else(|e| panic!("{input:?}: {e}"));
                let want = if rel.is_empty() {
                    cwd.clone()
                } else {
                    cwd.join(rel)
                };
                assert_eq!(spec.source, Source::Path(want), "{input:?}");
                assert_eq!(spec.rev.as_deref(), rev, "{input:?}");
                assert_eq!(spec.name, name, "{input:?}");
            }
            Expect::Url(url, rev, name) => {
                let spec = got.unwrap_or_else(|e| panic!("{input:?}: {e}"));
                assert_eq!(spec.source, Source::Url(url.into()), "{input:?}");
                assert_eq!(spec.rev.as_deref(), rev, "{input:?}");
                assert_eq!(spec.name, name, "{input:?}");
            }
            Expect::Err(needle) => {
                let err = got.expect_err(input).to_string();
                assert!(err.contains(needle), "{input:?}: {err}");
            }
        }
    }

    /// A repository found above the named directory is taken only when this user owns it.
    #[test]
    fn an_enclosing_repository_of_another_owner_is_not_taken() {
        let top = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(top.path().join(".git/objects")).unwrap();
        std::fs::write(top.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let mine = top.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        let mine = mine.canonicalize().unwrap();
        assert_eq!(
            enclosing_repository(&mine),
            Some(top.path().canonicalize().unwrap())
        );
        if rustix::process::geteuid().is_root() {
            // Only root can hand the repository to someone else here.
            let nobody = rustix::process::Uid::from_raw(65534);
            rustix::fs::chown(top.path().join(".git"), Some(nobody), None).unwrap();
            assert_eq!(enclosing_repository(&mine), None);
            // Named directly, it is the person's own choice (git's safe.directory aside).
            assert!(enclosing_repository(&top.path().canonicalize().unwrap()).is_some());
        }
    }

    #[test]
    fn parses_paths() {
        let f = fixture();
        let root_name = f.root().file_name().unwrap().to_str().unwrap().to_string();
        let abs = format!("{}/app", f.root().display());
        check(&f, "app", Expect::Path("app", None, "app"));
        check(&f, "./app/", Expect::Path("app", None, "app"));
        check(&f, &abs, Expect::Path("app", None, "app"));
        check(&f, "app@main", Expect::Path("app", Some("main"), "app"));
        check(&f, "app@HEAD~1", Expect::Path("app", Some("HEAD~1"), "app"));
        check(
            &f,
            "app@v1.0^{commit}",
            Expect::Path("app", Some("v1.0^{commit}"), "app"),
        );
        check(
            &f,
            "app@main@{1}",
            Expect::Path("app", Some("main@{1}"), "app"),
        );
        check(&f, "app/.git", Expect::Path("app/.git", None, "app"));
        check(&f, "srv/lib.git", Expect::Path("srv/lib.git", None, "lib"));
        check(
            &f,
            "srv/lib.git@v2",
            Expect::Path("srv/lib.git", Some("v2"), "lib"),
        );
        check(&f, ".", Expect::Path("", None, &root_name));
        check(&f, "app/../x", Expect::Path("x", None, "x"));
    }

    #[test]
    fn a_directory_inside_a_repository_means_the_whole_repository() {
        let f = fixture();
        let root = f.root();
        for dir in [
            "top/.git/objects",
            "top/sub/dir",
            "bare.git/objects",
            "bare.git/hooks",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for head in ["top/.git/HEAD", "bare.git/HEAD"] {
            std::fs::write(root.join(head), "ref: refs/heads/main\n").unwrap();
        }
        std::fs::create_dir_all(root.join("linked/deep")).unwrap();
        std::fs::write(root.join("linked/.git"), "gitdir: /elsewhere\n").unwrap();

        let spec = RepoSpec::parse("top/sub/dir@v1", &root).unwrap();
        assert_eq!(spec.source, Source::Path(root.join("top")));
        assert_eq!(spec.name, "top");
        assert_eq!(spec.rev.as_deref(), Some("v1"));
        assert_eq!(spec.within, Some(root.join("top/sub/dir")));
        let spec = RepoSpec::parse("top/sub/dir@worktree", &root).unwrap();
        assert!(spec.wants_work_tree());
        assert_eq!(spec.source, Source::Path(root.join("top")));

        let spec = RepoSpec::parse("top", &root).unwrap();
        assert_eq!(
            (spec.source, spec.within),
            (Source::Path(root.join("top")), None)
        );
        let spec = RepoSpec::parse("top/.git", &root).unwrap();
        assert_eq!(spec.source, Source::Path(root.join("top/.git")));
        assert_eq!((spec.name.as_str(), spec.within), ("top", None));

        let spec = RepoSpec::parse("bare.git/hooks", &root).unwrap();
        assert_eq!(spec.source, Source::Path(root.join("bare.git")));
        assert_eq!(spec.name, "bare");
        assert_eq!(spec.within, Some(root.join("bare.git/hooks")));

        let spec = RepoSpec::parse("linked/deep", &root).unwrap();
        assert_eq!(spec.source, Source::Path(root.join("linked")));
        assert_eq!(spec.within, Some(root.join("linked/deep")));

        // Outside any repository nothing moves; git says it is no repository later.
        let spec = RepoSpec::parse("x", &root).unwrap();
        assert_eq!(
            (spec.source, spec.within),
            (Source::Path(root.join("x")), None)
        );
    }

    #[test]
    fn refuses_bad_paths_and_revisions() {
        let f = fixture();
        check(&f, "", Expect::Err("empty"));
        check(&f, "missing", Expect::Err("no such path"));
        check(&f, "./a/../b/./missing", Expect::Err("b/missing"));
        check(&f, "missing@main", Expect::Err("no such path"));
        check(&f, "app@", Expect::Err("revision after `@` is empty"));
        check(&f, "app@-n", Expect::Err("starts with `-`"));
        check(&f, "app@--upload-pack=x", Expect::Err("starts with `-`"));
        check(&f, "app@main..dev", Expect::Err("range"));
        check(&f, "./app@HEAD:src", Expect::Err("not a commit name"));
        // git reads `user@host:path` as ssh even when `user` is a local directory.
        check(&f, "app@HEAD:src", Expect::Url("app@HEAD:src", None, "src"));
        check(&f, "app@a\tb", Expect::Err("control"));
        check(&f, "app\n", Expect::Err("control"));
        check(&f, "sp ace", Expect::Err("must match"));
        check(&f, "/", Expect::Err("cannot derive"));
        // The whole text is an existing path, so nothing is split off (and `@` is not a valid
        // name character); otherwise the last `@` separates the revision.
        check(&f, "with@v1", Expect::Err("name \"with@v1\" must match"));
        check(
            &f,
            "odd@name@dev",
            Expect::Err("name \"odd@name\" must match"),
        );
    }

    #[test]
    fn parses_urls() {
        let f = fixture();
        let gh = "https://github.com/o/r.git";
        check(&f, gh, Expect::Url(gh, None, "r"));
        check(
            &f,
            "https://github.com/o/r.git@v1",
            Expect::Url(gh, Some("v1"), "r"),
        );
        check(
            &f,
            "https://tok@github.com/o/r@main",
            Expect::Url("https://tok@github.com/o/r", Some("main"), "r"),
        );
        check(
            &f,
            "https://u:p@host:8443/g/sub/proj/",
            Expect::Url("https://u:p@host:8443/g/sub/proj/", None, "proj"),
        );
        check(
            &f,
            "git@github.com:o/r.git",
            Expect::Url("git@github.com:o/r.git", None, "r"),
        );
        check(
            &f,
            "git@github.com:o/r.git@feature/x",
            Expect::Url("git@github.com:o/r.git", Some("feature/x"), "r"),
        );
        check(
            &f,
            "ssh://git@host:2222/o/r.git@abc123",
            Expect::Url("ssh://git@host:2222/o/r.git", Some("abc123"), "r"),
        );
        check(
            &f,
            "file:///srv/git/app.git@HEAD~2",
            Expect::Url("file:///srv/git/app.git", Some("HEAD~2"), "app"),
        );
        check(&f, "host:repo", Expect::Url("host:repo", None, "repo"));
    }

    #[test]
    fn refuses_bad_urls() {
        let f = fixture();
        check(&f, "http://example.com/r.git", Expect::Err("not allowed"));
        check(&f, "git://example.com/r.git", Expect::Err("not allowed"));
        check(&f, "ext::sh -c touch% /tmp/x", Expect::Err("whitespace"));
        check(&f, "ext::sh", Expect::Err("remote-helper"));
        check(
            &f,
            "ssh://-oProxyCommand=x/r",
            Expect::Err("must not start with `-`"),
        );
        check(
            &f,
            "-oProxyCommand=x:r",
            Expect::Err("must not start with `-`"),
        );
        check(&f, "https://github.com", Expect::Err("cannot derive"));
        check(&f, "https:///r.git", Expect::Err("no host"));
        check(
            &f,
            "https://github.com/o/r@-x",
            Expect::Err("starts with `-`"),
        );
        check(
            &f,
            "https://github.com/o/bad%20name",
            Expect::Err("must match"),
        );
        check(&f, "https://h/o/.git", Expect::Err("cannot derive"));
        check(&f, "https://h/o/..", Expect::Err("must match"));
        check(
            &f,
            "https://user:secret@h/o/..",
            Expect::Err("https://***@h/o/.."),
        );
    }
}
