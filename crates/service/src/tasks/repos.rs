//! Registered repositories: registering one (admins only; every field checked here, for every
//! interface), listing them, and how warming each stands.
//!
//! - The name is 1-100 letters, digits, `.`, `_` or `-`, not starting with `.` or `-`.
//! - The source is an absolute path on the server or a git URL of an allowed transport, with
//!   no revision (`branch` names the default one).
//! - Checks and prepare commands: at most 50 non-empty commands of at most 4096 bytes, no NUL.
//! - Mounts: at most 50 absolute directories that exist, never the server user's home,
//!   `WARDEN_HOME`, `/`, `/proc`, `/sys`, `/dev` or `/etc`, and each under one of the operator's
//!   `[sandbox] repo_mount_roots` (an API token is not the operator).
//! - A registered repository starts warming at once ([`crate::warm`]) when the service warms.

use std::path::Path;
use warden_protocol::views::{RepoView, Timestamp};

use warden_repo::{RepoSpec, Source};
use warden_store::{NewRepo, Repository};

use super::{valid_repo_name, valid_rev, Principal, Role, ServiceError, TaskService};
use crate::warm::Warmth;

/// Most checks, prepare commands or mounts one repository may have.
const MAX_ENTRIES: usize = 50;
/// Longest check or prepare command, in bytes.
const MAX_COMMAND_BYTES: usize = 4096;

/// A repository to register, as any interface received it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoRegistration {
    pub name: String,
    /// An absolute path on the server or a git URL.
    pub source: String,
    pub branch: Option<String>,
    pub checks: Vec<String>,
    pub mounts: Vec<String>,
    pub prepare: Vec<String>,
}

impl TaskService {
    /// Registers a repository (admins only) and starts warming it.
    pub async fn register_repo(
        &self,
        principal: &Principal,
        registration: RepoRegistration,
    ) -> Result<RepoView, ServiceError> {
        if principal.role != Role::Admin {
            return Err(ServiceError::Forbidden(
                "only admin tokens register repositories".into(),
            ));
        }
        let invalid = |message: String| ServiceError::Invalid(message);
        if !valid_repo_name(&registration.name) {
            return Err(invalid(
                "name must be 1-100 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
                    .into(),
            ));
        }
        let is_url = registration.source.contains("://") || !registration.source.starts_with('/');
        if !is_url && !Path::new(&registration.source).is_absolute() {
            return Err(invalid("a source path must be absolute".into()));
        }
        let spec = RepoSpec::parse(&registration.source, Path::new("/"))
            .map_err(|e| invalid(format!("invalid source: {e}")))?;
        if spec.rev.is_some() {
            return Err(invalid(
                "the source must not name a revision (@REV); use branch".into(),
            ));
        }
        if let Some(branch) = &registration.branch {
            if !valid_rev(branch) || branch == warden_repo::WORK_TREE_REV {
                return Err(invalid(format!("invalid branch {branch:?}")));
            }
        }
        for (field, commands) in [
            ("checks", &registration.checks),
            ("prepare", &registration.prepare),
        ] {
            if commands.len() > MAX_ENTRIES
                || commands
                    .iter()
                    .any(|c| c.trim().is_empty() || c.len() > MAX_COMMAND_BYTES || c.contains('\0'))
            {
                return Err(invalid(format!(
                    "{field} must be at most {MAX_ENTRIES} non-empty commands of at most \
                     {MAX_COMMAND_BYTES} bytes"
                )));
            }
        }
        if registration.mounts.len() > MAX_ENTRIES {
            return Err(invalid(format!(
                "mounts must be at most {MAX_ENTRIES} directories"
            )));
        }
        for mount in &registration.mounts {
            if !mount.starts_with('/') || mount.contains('\0') {
                return Err(invalid(format!(
                    "mount {mount:?} must be an absolute path on the server"
                )));
            }
            // The server's own paths: its user's home and state directory stay out.
            let user_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            let warden_home = self.repos.as_ref().map(|repos| repos.home());
            let checked =
                warden_engine::toolchain::check_mount(mount, user_home.as_deref(), warden_home)
                    .map_err(invalid)?;
            warden_engine::toolchain::check_repo_mount(&self.repo_mount_roots, &checked)
                .map_err(invalid)?;
        }
        let source = match &spec.source {
            Source::Path(path) => path.to_string_lossy().into_owned(),
            Source::Url(url) => url.clone(),
        };
        let repo = self
            .store
            .register_repo(NewRepo {
                name: registration.name,
                source,
                branch: registration.branch,
                checks: registration.checks,
                mounts: registration.mounts,
                prepare: registration.prepare,
                created_by: principal.name.clone(),
            })
            .await?;
        if let Some(warmer) = &self.warmer {
            warmer.start(std::sync::Arc::clone(&self.store), &repo.name);
        }
        Ok(self.repo_view(&repo))
    }

    /// Every registered repository, by name (anyone with a token sees them).
    pub async fn repos(&self, _principal: &Principal) -> Result<Vec<RepoView>, ServiceError> {
        let repos = self.store.list_repos().await?;
        Ok(repos.iter().map(|repo| self.repo_view(repo)).collect())
    }

    /// Registered repository `name`.
    pub async fn repo(&self, _principal: &Principal, name: &str) -> Result<RepoView, ServiceError> {
        let repo = self
            .store
            .get_repo(name)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("repository {name} not found")))?;
        Ok(self.repo_view(&repo))
    }

    /// `repo` as it may be shown: its source without credentials, and how warming it stands
    /// in this process.
    fn repo_view(&self, repo: &Repository) -> RepoView {
        let source = match warden_repo::RepoSpec::parse(&repo.source, std::path::Path::new("/")) {
            Ok(spec) => spec.source.display_redacted(),
            Err(_) => warden_repo::redact_credentials(&repo.source),
        };
        let warm = self.warmth(&repo.name).map(|mut warmth| {
            // Progress lines and errors are git's and the server's text: no secrets, but a
            // URL git repeats may hold them.
            warmth.error = warmth.error.map(|e| warden_repo::redact_credentials(&e));
            warmth
        });
        RepoView {
            name: repo.name.clone(),
            source,
            branch: repo.branch.clone(),
            checks: repo.checks.clone(),
            mounts: repo.mounts.clone(),
            prepare: repo.prepare.clone(),
            created_by: repo.created_by.clone(),
            created_at: Timestamp(repo.created_at_ms),
            warm,
        }
    }

    /// Pins registered repository `name` at `rev` (its registered branch without one) and
    /// materializes the verified read-only snapshot of that commit, for reading its code
    /// outside a task (`/mcp`'s `read_file`, `search`, `list_dir`). Every role may read a
    /// registered repository. The snapshot stays in use (safe from eviction) while the
    /// returned value lives.
    pub async fn read_snapshot(
        &self,
        _principal: &Principal,
        name: &str,
        rev: Option<&str>,
    ) -> Result<warden_engine::question::TaskRepo, ServiceError> {
        if let Some(rev) = rev {
            if !super::submit::valid_rev(rev) {
                return Err(ServiceError::Invalid(format!(
                    "revision {rev:?} is not a branch, tag or commit name"
                )));
            }
        }
        let registered = self
            .store
            .get_repo(name)
            .await?
            .ok_or_else(|| ServiceError::UnknownRepository { name: name.into() })?;
        let repos = self.repos.clone().ok_or_else(|| {
            ServiceError::internal("this front door has no repository store to read from")
        })?;
        let mut spec = warden_repo::RepoSpec::parse(&registered.source, std::path::Path::new("/"))
            .map_err(ServiceError::internal)?;
        spec.name = registered.name;
        spec.rev = rev.map(str::to_string).or(registered.branch);
        pin_for_reading(repos, spec).await
    }

    /// How warming repository `name` stands, if this process warmed it.
    pub fn warmth(&self, name: &str) -> Option<Warmth> {
        self.warmer.as_ref()?.warmth(name)
    }
}

/// Pins `spec` and materializes its snapshot (blocking work, on its own thread), for reading
/// a repository's code outside a task; nothing is reported while it runs. A disk budget's
/// refusal and a revision that does not resolve are the caller's to fix.
pub async fn pin_for_reading(
    repos: warden_repo::RepoStore,
    spec: RepoSpec,
) -> Result<warden_engine::question::TaskRepo, super::ServiceError> {
    use warden_engine::question::{self, SetupError};
    let pinned = tokio::task::spawn_blocking(move || {
        question::pin_all(&repos, std::slice::from_ref(&spec), &|_| {})
    })
    .await
    .map_err(|error| ServiceError::Internal(format!("pinning crashed: {error}")))?;
    match pinned {
        Ok(mut repos) if repos.len() == 1 => Ok(repos.remove(0)),
        Ok(_) => Err(ServiceError::Internal("pinning gave no repository".into())),
        Err(SetupError::Usage(message)) => Err(ServiceError::Invalid(message)),
        Err(SetupError::Quota(message)) => Err(ServiceError::Conflict(message)),
        Err(SetupError::Infrastructure(message)) => Err(ServiceError::Internal(message)),
    }
}
