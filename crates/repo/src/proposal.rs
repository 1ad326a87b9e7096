//! Proposals: the commit a change task produces, stored under `refs/warden/proposals/<task-id>`
//! in Warden's mirror, its per-file diff statistics, and fetching it into the user's repository
//! as a branch without touching their work tree, index or current branch.

use std::path::Path;

use crate::candidate::{write_commit, CommitIdentity};
use crate::error::RepoError;
use crate::git::Git;
use crate::materialize::ObjectFormat;

/// The ref a task's proposal lives under in the mirror.
pub fn proposal_ref(task_id: &str) -> String {
    format!("refs/warden/proposals/{task_id}")
}

/// What [`create_proposal_commit`] needs.
#[derive(Debug, Clone, Copy)]
pub struct ProposalInput<'a> {
    pub git: &'a Git,
    pub mirror: &'a Path,
    pub scratch: &'a Path,
    pub task_id: &'a str,
    pub base_commit: &'a str,
    pub tree: &'a str,
    /// The agent's summary; the first line becomes the subject.
    pub summary: &'a str,
    /// Seconds since the epoch used as author and committer date (derived from the task, so the
    /// commit id is stable for the same inputs).
    pub time: u64,
    /// `Name <email>` of each person the change is co-authored with (the requester, where
    /// known): a `Co-authored-by` trailer each. Lines with a line break are left out.
    pub co_authors: &'a [String],
}

/// Creates the proposal commit and points the task's proposal ref at it; returns the commit id.
pub fn create_proposal_commit(input: ProposalInput<'_>) -> Result<String, RepoError> {
    let summary = input.summary.trim();
    let mut lines = summary.lines();
    let subject: String = lines
        .next()
        .unwrap_or("warden change")
        .chars()
        .take(200)
        .collect();
    let rest: Vec<&str> = lines.collect();
    let body = rest.join("\n");
    let body = body.trim();
    let mut message = if subject.trim().is_empty() {
        "warden change".to_string()
    } else {
        subject
    };
    message.push('\n');
    if !body.is_empty() {
        message.push('\n');
        message.push_str(body);
        message.push('\n');
    }
    message.push_str(&format!("\nWarden-Task: {}\n", input.task_id));
    for co_author in input
        .co_authors
        .iter()
        .filter(|c| !c.trim().is_empty() && !c.contains(['\n', '\r']))
    {
        message.push_str(&format!("Co-authored-by: {}\n", co_author.trim()));
    }
    let commit = write_commit(
        input.git,
        input.mirror,
        input.scratch,
        input.tree,
        input.base_commit,
        &message,
        &CommitIdentity::warden(input.time),
    )?;
    let git_dir = format!("--git-dir={}", input.mirror.display());
    input.git.run(
        input.mirror,
        &[
            &git_dir,
            "update-ref",
            &proposal_ref(input.task_id),
            &commit,
        ],
    )?;
    Ok(commit)
}

/// One line of `diff-tree --numstat` plus the change's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub status: String,
    /// `None` for binary files.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// Per-file statistics between two commits (plumbing only: no external diff, no textconv).
pub fn diff_files(
    git: &Git,
    mirror: &Path,
    base: &str,
    commit: &str,
) -> Result<Vec<FileStat>, RepoError> {
    let git_dir = format!("--git-dir={}", mirror.display());
    let common = [
        git_dir.as_str(),
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
    ];
    let mut numstat_args = common.to_vec();
    numstat_args.extend_from_slice(&["--numstat", base, commit]);
    let numstat = git.run(mirror, &numstat_args)?;
    let mut status_args = common.to_vec();
    status_args.extend_from_slice(&["--name-status", base, commit]);
    let status = git.run(mirror, &status_args)?;

    let mut kinds = std::collections::BTreeMap::new();
    let mut fields = status.stdout.split(|&b| b == 0).filter(|f| !f.is_empty());
    while let (Some(kind), Some(path)) = (fields.next(), fields.next()) {
        let kind = match kind.first() {
            Some(b'A') => "added",
            Some(b'D') => "deleted",
            _ => "modified",
        };
        kinds.insert(String::from_utf8_lossy(path).into_owned(), kind.to_string());
    }
    let mut files = Vec::new();
    for record in numstat.stdout.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let text = String::from_utf8_lossy(record);
        let mut parts = text.splitn(3, '\t');
        let (added, removed, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(d), Some(p)) => (a, d, p.to_string()),
            _ => {
                return Err(RepoError::UnexpectedOutput(format!(
                    "diff-tree --numstat printed {text:?}"
                )))
            }
        };
        files.push(FileStat {
            status: kinds
                .get(&path)
                .cloned()
                .unwrap_or_else(|| "modified".into()),
            path,
            additions: added.parse().ok(),
            deletions: removed.parse().ok(),
        });
    }
    Ok(files)
}

/// What `apply` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    Created,
    /// The branch already pointed at the proposal commit.
    AlreadyThere,
}

/// Why `apply` refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The branch name is not acceptable to git or Warden.
    #[error("invalid branch name {0:?}")]
    InvalidBranch(String),
    /// The branch exists and points somewhere else.
    #[error("branch {branch} already exists at {existing}; choose another name with --branch")]
    BranchExists { branch: String, existing: String },
    /// The branch a proposal fast-forwards is no longer at the commit it builds on (someone
    /// pushed to it, or deleted it).
    #[error("branch {branch} is {}, not at {expected} which the proposal builds on; nothing was pushed", .existing.as_ref().map_or("gone from the remote".to_string(), |e| format!("at {e}")))]
    BranchMoved {
        branch: String,
        expected: String,
        existing: Option<String>,
    },
    /// The mirror has no proposal for the task.
    #[error("no proposal {0} in Warden's mirror")]
    NoProposal(String),
    /// A proposal bundle's prerequisite, the base commit, is not in the user's repository.
    #[error("{repo} does not hold the proposal's base commit {base}; fetch it (e.g. `git fetch`) and try again")]
    MissingBase { repo: String, base: String },
    #[error(transparent)]
    Repo(#[from] RepoError),
}

/// Fetches `refs/warden/proposals/<task>` from `mirror` into `user_repo` as `refs/heads/<branch>`.
/// Only objects and that one ref are written: the work tree, the index and `HEAD` are left
/// alone (a fetch into the checked-out branch is refused by git itself).
pub fn fetch_proposal_into(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    user_repo: &Path,
    branch: &str,
) -> Result<(ApplyOutcome, String), ApplyError> {
    let full = format!("refs/heads/{branch}");
    if branch.starts_with('-') || git.run(user_repo, &["check-ref-format", &full]).is_err() {
        return Err(ApplyError::InvalidBranch(branch.to_string()));
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let reference = proposal_ref(task_id);
    let commit = git
        .run(
            mirror,
            &[
                &git_dir,
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{reference}^{{commit}}"),
            ],
        )
        .map_err(|_| ApplyError::NoProposal(task_id.to_string()))?
        .text();
    if ObjectFormat::of_id(&commit).is_none() {
        return Err(ApplyError::NoProposal(task_id.to_string()));
    }
    match git.run(
        user_repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{full}^{{commit}}"),
        ],
    ) {
        Ok(existing) => {
            let existing = existing.text();
            if existing == commit {
                return Ok((ApplyOutcome::AlreadyThere, commit));
            }
            return Err(ApplyError::BranchExists {
                branch: branch.to_string(),
                existing,
            });
        }
        Err(RepoError::GitFailed { code: Some(1), .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let mirror_text = mirror.display().to_string();
    // No `+`: git refuses to move an existing branch; the ref did not exist a moment ago.
    let refspec = format!("{reference}:{full}");
    git.run_transfer(
        user_repo,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-maintenance",
            "--no-recurse-submodules",
            "--end-of-options",
            &mirror_text,
            &refspec,
        ],
    )?;
    Ok((ApplyOutcome::Created, commit))
}

/// [`fetch_proposal_into`] from a git bundle of the proposal (as `GET /v1/tasks/{id}/proposal`
/// serves it, its prerequisite `base`) instead of Warden's mirror: the bundle is unpacked
/// ([`unbundle_proposal`]), and that repository stands in for the mirror, so the branch is
/// written exactly as in-process.
pub fn fetch_bundle_into(
    git: &Git,
    bundle: &[u8],
    task_id: &str,
    base: &str,
    user_repo: &Path,
    branch: &str,
) -> Result<(ApplyOutcome, String), ApplyError> {
    let full = format!("refs/heads/{branch}");
    if branch.starts_with('-') || git.run(user_repo, &["check-ref-format", &full]).is_err() {
        return Err(ApplyError::InvalidBranch(branch.to_string()));
    }
    let unbundled = unbundle_proposal(git, bundle, task_id, base, user_repo)?;
    fetch_proposal_into(git, unbundled.repo(), task_id, user_repo, branch)
}

/// A proposal bundle unpacked into a private bare repository (removed when dropped) whose
/// objects borrow a user's repository: the proposal's ref (`refs/warden/proposals/<task>`) and
/// commits, readable like Warden's mirror, the user's repository untouched.
pub struct UnbundledProposal {
    _scratch: Scratch,
    repo: std::path::PathBuf,
}

impl UnbundledProposal {
    /// The bare repository.
    pub fn repo(&self) -> &Path {
        &self.repo
    }
}

/// Unpacks `bundle` (task `task_id`'s proposal, its prerequisite `base`) into a scratch
/// repository borrowing `user_repo`'s objects, where the base must be
/// ([`ApplyError::MissingBase`] otherwise).
pub fn unbundle_proposal(
    git: &Git,
    bundle: &[u8],
    task_id: &str,
    base: &str,
    user_repo: &Path,
) -> Result<UnbundledProposal, ApplyError> {
    let objects = git
        .run(
            user_repo,
            &[
                "rev-parse",
                "--path-format=absolute",
                "--git-path",
                "objects",
            ],
        )?
        .text();
    let scratch = Scratch::create()?;
    let file = scratch.path().join("proposal.bundle");
    std::fs::write(&file, bundle).map_err(RepoError::io("write", &file))?;
    let repo = scratch.path().join("proposal.git");
    let repo_text = repo.display().to_string();
    git.run(scratch.path(), &["init", "--quiet", "--bare", &repo_text])?;
    let alternates = repo.join("objects/info/alternates");
    std::fs::write(&alternates, format!("{objects}\n"))
        .map_err(RepoError::io("write", &alternates))?;
    let git_dir = format!("--git-dir={repo_text}");
    let missing_base = || ApplyError::MissingBase {
        repo: user_repo.display().to_string(),
        base: base.to_string(),
    };
    if ObjectFormat::of_id(base).is_none() {
        return Err(ApplyError::NoProposal(task_id.to_string()));
    }
    if git
        .run(
            &repo,
            &[&git_dir, "cat-file", "-e", &format!("{base}^{{commit}}")],
        )
        .is_err()
    {
        return Err(missing_base());
    }
    let reference = proposal_ref(task_id);
    git.run_transfer(
        &repo,
        &[
            &git_dir,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-maintenance",
            "--end-of-options",
            &file.display().to_string(),
            &format!("{reference}:{reference}"),
        ],
    )?;
    Ok(UnbundledProposal {
        _scratch: scratch,
        repo,
    })
}

/// A private directory under the temporary directory, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn create() -> Result<Scratch, RepoError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("warden-proposal-{}-{nanos:09}", std::process::id()));
        // Fails if it exists: never a directory someone else prepared; readable by us only.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&path)
            .map_err(RepoError::io("create directory", &path))?;
        Ok(Scratch(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The hash an approval binds to: sha256 over the canonical JSON (sorted keys, no spaces) of
/// the base commit, tree, commit and validation records.
pub fn proposal_hash(
    base_commit: &str,
    tree: &str,
    commit: &str,
    validations: &serde_json::Value,
) -> String {
    use sha2::Digest;
    let canonical = serde_json::json!({
        "base_commit": base_commit,
        "commit": commit,
        "tree": tree,
        "validations": validations,
    });
    let text = canonical.to_string();
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
}

/// The commit `refs/heads/<branch>` points at on `remote`, asked of the remote itself.
pub fn remote_branch(
    git: &Git,
    mirror: &Path,
    remote: &str,
    branch: &str,
) -> Result<Option<String>, RepoError> {
    let git_dir = format!("--git-dir={}", mirror.display());
    let full = format!("refs/heads/{branch}");
    let output = git.run_transfer(
        mirror,
        &[&git_dir, "ls-remote", "--end-of-options", remote, &full],
    )?;
    Ok(output.text().lines().find_map(|line| {
        let (id, name) = line.split_once('\t')?;
        (name == full).then(|| id.to_string())
    }))
}

/// What [`push_proposal`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    Pushed,
    /// The remote branch already held the commit (an earlier attempt got through).
    AlreadyThere,
}

/// Pushes `commit` from the mirror to `refs/heads/<branch>` on `remote`, at most once: the
/// remote is asked first, a branch already at the commit counts as done, a branch anywhere else
/// is refused, and the push itself never forces.
pub fn push_proposal(
    git: &Git,
    mirror: &Path,
    remote: &str,
    commit: &str,
    branch: &str,
) -> Result<PushOutcome, ApplyError> {
    push_proposal_onto(git, mirror, remote, commit, branch, None)
}

/// [`push_proposal`], or with `onto` a fast-forward of an existing branch: the remote branch
/// must be at `onto` (the commit `commit` builds on: an earlier proposal published there), and
/// is moved to `commit` without forcing. A branch already at `commit` counts as done (an
/// earlier attempt got through); a branch that is missing or anywhere else is refused.
pub fn push_proposal_onto(
    git: &Git,
    mirror: &Path,
    remote: &str,
    commit: &str,
    branch: &str,
    onto: Option<&str>,
) -> Result<PushOutcome, ApplyError> {
    let full = format!("refs/heads/{branch}");
    if branch.starts_with('-') || git.run(mirror, &["check-ref-format", &full]).is_err() {
        return Err(ApplyError::InvalidBranch(branch.to_string()));
    }
    match (remote_branch(git, mirror, remote, branch)?, onto) {
        (Some(existing), _) if existing == commit => return Ok(PushOutcome::AlreadyThere),
        (Some(existing), Some(onto)) if existing == onto => {}
        (Some(existing), Some(onto)) => {
            return Err(ApplyError::BranchMoved {
                branch: branch.to_string(),
                expected: onto.to_string(),
                existing: Some(existing),
            })
        }
        (None, Some(onto)) => {
            return Err(ApplyError::BranchMoved {
                branch: branch.to_string(),
                expected: onto.to_string(),
                existing: None,
            })
        }
        (Some(existing), None) => {
            return Err(ApplyError::BranchExists {
                branch: branch.to_string(),
                existing,
            })
        }
        (None, None) => {}
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let refspec = format!("{commit}:{full}");
    git.run_transfer(
        mirror,
        &[
            &git_dir,
            "push",
            "--quiet",
            "--no-verify",
            "--end-of-options",
            remote,
            &refspec,
        ],
    )?;
    match remote_branch(git, mirror, remote, branch)? {
        Some(existing) if existing == commit => Ok(PushOutcome::Pushed),
        other => Err(ApplyError::Repo(RepoError::UnexpectedOutput(format!(
            "after the push the remote branch {branch} is at {other:?}, not {commit}"
        )))),
    }
}
