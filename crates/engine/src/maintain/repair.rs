//! Building blocks of `--mode model` (not wired into the pipeline yet: the mode is still
//! refused): what the repairing agent is told when an upgrade breaks a check, and the scope
//! check its repaired tree must pass before readiness.
//!
//! The repair may change the code that uses the upgraded packages, never the dependency graph:
//! every registry package of the repaired tree's `Cargo.lock` must be exactly one of the
//! upgraded tree's (same name, version and source, as many times), so the agent can neither
//! undo the upgrade, nor move another dependency, nor add or remove one. The workspace's own
//! packages (no `source`) are the agent's to change.

use super::cargo::{LockedPackage, Lockfile};
use warden_protocol::{Upgrade, Validation};

/// How many lines of the failing check's output the repair prompt quotes.
pub const PROMPT_TAIL_LINES: usize = 40;

/// The request the repairing agent gets: the upgrade, the check it broke with its exit code
/// and output tail, and the scope it must keep to.
pub fn repair_prompt(upgrade: &Upgrade, failing: &Validation) -> String {
    let all: Vec<&str> = failing.output_tail.trim_end().lines().collect();
    let tail = all[all.len().saturating_sub(PROMPT_TAIL_LINES)..].join("\n");
    let exit = failing
        .exit_code
        .map_or("was killed or timed out".to_string(), |c| {
            format!("exited with code {c}")
        });
    let advisories = if upgrade.advisories.is_empty() {
        String::new()
    } else {
        format!(" (it clears {})", upgrade.advisories.join(", "))
    };
    format!(
        "Warden upgraded the dependency `{package}` from {from} to {to}{advisories} in \
Cargo.lock, and the check `{command}` now fails on the upgraded tree {tree}: it {exit}.\n\n\
Output (tail):\n```\n{tail}\n```\n\n\
Repair the code so that the checks pass with {package} {to}. Scope:\n\
- Change only what this upgrade breaks: the code that uses `{package}` and the tests about it.\n\
- Do not change the dependency graph: {package} must stay at {to}, and no other package in \
Cargo.lock may be added, removed, upgraded or downgraded. Do not run `cargo update` or edit \
Cargo.lock; a submission whose Cargo.lock differs from the upgrade's is refused.\n\
- Do not delete, skip or disable checks or tests to make them pass.\n\n\
Run run_checks to see the failure, then submit_change with a summary of the repair.",
        package = upgrade.package,
        from = upgrade.from,
        to = upgrade.to,
        command = failing.command,
        tree = failing.tree,
    )
}

/// `name version (source)`, how a reason names a registry package.
fn label(package: &LockedPackage) -> String {
    format!(
        "{} {} ({})",
        package.name,
        package.version,
        package.source.as_deref().unwrap_or("workspace")
    )
}

/// Whether the repaired tree's lockfile keeps to the upgrades: each upgraded package is at its
/// target version, and the registry packages are exactly the upgraded tree's. `Err` names every
/// difference.
pub fn lockfile_scope(
    upgraded: &Lockfile,
    repaired: &Lockfile,
    upgrades: &[Upgrade],
) -> Result<(), Vec<String>> {
    let mut reasons = Vec::new();
    for upgrade in upgrades {
        let at_target = repaired
            .packages
            .iter()
            .any(|p| p.source.is_some() && p.name == upgrade.package && p.version == upgrade.to);
        if !at_target {
            let found: Vec<&str> = repaired
                .packages
                .iter()
                .filter(|p| p.source.is_some() && p.name == upgrade.package)
                .map(|p| p.version.as_str())
                .collect();
            let found = if found.is_empty() {
                "absent".to_string()
            } else {
                format!("at {}", found.join(", "))
            };
            reasons.push(format!(
                "{} is {found} in the repaired Cargo.lock, not at the upgrade's {}",
                upgrade.package, upgrade.to
            ));
        }
    }
    let registry = |lock: &Lockfile| -> Vec<String> {
        let mut all: Vec<String> = lock
            .packages
            .iter()
            .filter(|p| p.source.is_some())
            .map(label)
            .collect();
        all.sort();
        all
    };
    let (mut before, mut after) = (registry(upgraded), registry(repaired));
    // What both hold, each occurrence once, is dropped; what is left differs.
    let mut i = 0;
    while i < before.len() {
        match after.iter().position(|p| *p == before[i]) {
            Some(j) => {
                after.remove(j);
                before.remove(i);
            }
            None => i += 1,
        }
    }
    for package in before {
        reasons.push(format!(
            "the repair removed {package} from Cargo.lock (beyond the upgrade)"
        ));
    }
    for package in after {
        reasons.push(format!(
            "the repair added {package} to Cargo.lock (beyond the upgrade)"
        ));
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

    fn lock(packages: &[(&str, &str, bool)]) -> Lockfile {
        Lockfile {
            packages: packages
                .iter()
                .map(|(name, version, registry)| LockedPackage {
                    name: name.to_string(),
                    version: version.to_string(),
                    source: registry.then(|| CRATES_IO.to_string()),
                    dependencies: vec![],
                })
                .collect(),
        }
    }

    fn upgrade() -> Upgrade {
        Upgrade {
            package: "smallvec".into(),
            from: "1.6.0".into(),
            to: "1.6.1".into(),
            advisories: vec!["RUSTSEC-2021-0003".into()],
        }
    }

    #[test]
    fn a_repair_keeps_the_upgraded_dependency_graph_and_may_change_the_workspace() {
        let upgraded = lock(&[
            ("app", "0.1.0", false),
            ("smallvec", "1.6.1", true),
            ("itoa", "1.0.1", true),
        ]);
        // The workspace's own package may change (the agent edits code, even versions).
        let repaired = lock(&[
            ("app", "0.1.1", false),
            ("itoa", "1.0.1", true),
            ("smallvec", "1.6.1", true),
        ]);
        assert_eq!(lockfile_scope(&upgraded, &repaired, &[upgrade()]), Ok(()));
        // Undoing the upgrade is refused, naming the version found.
        let undone = lock(&[
            ("app", "0.1.0", false),
            ("smallvec", "1.6.0", true),
            ("itoa", "1.0.1", true),
        ]);
        let reasons = lockfile_scope(&upgraded, &undone, &[upgrade()]).unwrap_err();
        assert_eq!(
            reasons,
            [
                "smallvec is at 1.6.0 in the repaired Cargo.lock, not at the upgrade's 1.6.1",
                format!("the repair removed smallvec 1.6.1 ({CRATES_IO}) from Cargo.lock (beyond the upgrade)")
                    .as_str(),
                format!("the repair added smallvec 1.6.0 ({CRATES_IO}) to Cargo.lock (beyond the upgrade)")
                    .as_str(),
            ]
        );
        // So are moving, adding and removing any other registry package.
        let moved = lock(&[
            ("app", "0.1.0", false),
            ("smallvec", "1.6.1", true),
            ("itoa", "1.0.2", true),
            ("serde", "1.0.0", true),
        ]);
        let reasons = lockfile_scope(&upgraded, &moved, &[upgrade()]).unwrap_err();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].starts_with("the repair removed itoa 1.0.1"));
        assert!(reasons[1].starts_with("the repair added itoa 1.0.2"));
        assert!(reasons[2].starts_with("the repair added serde 1.0.0"));
        // A second copy of a package counts: the multiset must match.
        let doubled = lock(&[
            ("app", "0.1.0", false),
            ("smallvec", "1.6.1", true),
            ("itoa", "1.0.1", true),
            ("itoa", "1.0.1", true),
        ]);
        let reasons = lockfile_scope(&upgraded, &doubled, &[upgrade()]).unwrap_err();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        let absent = lock(&[("app", "0.1.0", false), ("itoa", "1.0.1", true)]);
        let reasons = lockfile_scope(&upgraded, &absent, &[upgrade()]).unwrap_err();
        assert!(reasons[0].starts_with("smallvec is absent"), "{reasons:?}");
    }

    #[test]
    fn the_repair_prompt_names_the_upgrade_the_check_its_output_and_the_scope() {
        let output: String = (1..=60).map(|i| format!("line {i}\n")).collect();
        let failing = Validation {
            command: "cargo test --locked --offline".into(),
            exit_code: Some(101),
            tree: "abc123".into(),
            config_hash: "sha256:x".into(),
            sandbox: "linux".into(),
            duration_ms: 10,
            output_tail: output,
        };
        let prompt = repair_prompt(&upgrade(), &failing);
        assert!(
            prompt.starts_with(
                "Warden upgraded the dependency `smallvec` from 1.6.0 to 1.6.1 (it clears \
                 RUSTSEC-2021-0003) in Cargo.lock, and the check `cargo test --locked \
                 --offline` now fails on the upgraded tree abc123: it exited with code 101."
            ),
            "{prompt}"
        );
        // The last 40 lines of the output, not the first 20.
        assert!(prompt.contains("line 21\n"), "{prompt}");
        assert!(!prompt.contains("line 20\n"), "{prompt}");
        assert!(prompt.contains("line 60\n```"), "{prompt}");
        assert!(
            prompt.contains("smallvec must stay at 1.6.1, and no other package in Cargo.lock"),
            "{prompt}"
        );
        assert!(
            prompt.contains("Do not delete, skip or disable checks"),
            "{prompt}"
        );
    }
}
