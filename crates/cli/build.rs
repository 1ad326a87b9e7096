//! Names the commit `warden --version` prints: `WARDEN_COMMIT` when the builder sets it (a
//! package built from a tarball), else `git rev-parse HEAD` of the source tree, else
//! `unknown`. (Uncommitted edits are not flagged: a build script is not rerun for them.)
#![allow(clippy::disallowed_methods)] // git, at build time, outside any sandbox

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=WARDEN_COMMIT");
    let commit = std::env::var("WARDEN_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| {
            // Rebuilt when HEAD moves, the branch it names moves, or refs are packed.
            for path in ["HEAD", "packed-refs"]
                .into_iter()
                .map(str::to_string)
                .chain(git(&["symbolic-ref", "-q", "HEAD"]))
            {
                // Only files that exist: cargo reruns a script whose listed file is missing
                // every time (a fresh clone keeps its branches in packed-refs).
                if let Some(file) = git(&["rev-parse", "--git-path", &path])
                    .filter(|file| std::path::Path::new(file).exists())
                {
                    println!("cargo:rerun-if-changed={file}");
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WARDEN_COMMIT={commit}");
}
