//! How list_dir and search walk a checkout: `.gitignore`/`.ignore` respected from the checkout
//! root down (never from directories above it, which belong to the host), hidden files shown,
//! `.git` never entered, symlinks never followed.
//!
//! A walk of a subdirectory starts at the checkout root and prunes everything that is neither an
//! ancestor of the target nor inside it, so ignore files between the root and the target apply. A
//! target that is itself ignored is still walked when asked for explicitly (as ripgrep does),
//! with only the ignore files inside it applied: see [`Scope::fallback`].

use ignore::overrides::Override;
use ignore::WalkBuilder;
use std::path::{Path, PathBuf};

/// One directory to walk inside one checkout.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The canonical checkout root.
    pub(crate) root: PathBuf,
    /// The canonical directory to walk, `root` itself or a directory inside it.
    pub(crate) target: PathBuf,
}

impl Scope {
    /// A walker over the target, honouring the ignore files from the root down.
    pub(crate) fn builder(&self, overrides: Option<Override>) -> WalkBuilder {
        let mut builder = WalkBuilder::new(&self.root);
        configure(&mut builder, overrides);
        if self.target != self.root {
            let target = self.target.clone();
            builder.filter_entry(move |entry| {
                let path = entry.path();
                !is_git_name(entry.file_name())
                    && (path.starts_with(&target) || target.starts_with(path))
            });
        }
        builder
    }

    /// A walker starting at the target itself, used when [`Scope::builder`] never reached the
    /// target because an ignore rule above it excludes it.
    pub(crate) fn fallback(&self, overrides: Option<Override>) -> WalkBuilder {
        let mut builder = WalkBuilder::new(&self.target);
        configure(&mut builder, overrides);
        builder
    }

    /// How many components the target lies below the root (walker depth of the target).
    pub(crate) fn target_depth(&self) -> usize {
        self.target
            .strip_prefix(&self.root)
            .map_or(0, |rel| rel.components().count())
    }
}

fn configure(builder: &mut WalkBuilder, overrides: Option<Override>) {
    builder
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| !is_git_name(entry.file_name()));
    if let Some(overrides) = overrides {
        builder.overrides(overrides);
    }
}

/// `.git` in any case: the name confinement refuses as well.
pub(crate) fn is_git_name(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().eq_ignore_ascii_case(b".git")
}

/// The `/`-separated text of a relative path, lossy for names that are not UTF-8.
pub(crate) fn slash_path(relative: &Path) -> String {
    let parts: Vec<_> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    parts.join("/")
}
