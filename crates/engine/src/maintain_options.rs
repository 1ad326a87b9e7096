//! What a `maintain` task upgrades and how ([`MaintainOptions`]), kept with the task's options
//! ([`crate::change::ChangeOptions`]) and in `[[schedules]]`; a leaf module, so the
//! configuration can check a schedule's selection without depending on the change pipeline.
//! The package name rules of the ecosystems live here for that reason (the pipeline checks
//! names from repositories with the same functions).

/// What a `maintain` task upgrades (`--select`) and how (`--mode`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintainOptions {
    /// `all` (default), `vulnerable`, or package names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<String>,
    /// `baseline` (default): deterministic, no model, drops an upgrade that breaks a check.
    /// `model`: an agent repairs the code an upgrade breaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `--informational`: the proposal also lists the informational advisories (unmaintained,
    /// unsound: RustSec's) of the base and whether the proposal clears them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub informational: bool,
}
impl MaintainOptions {
    /// Whether `--select vulnerable` was asked.
    pub fn vulnerable(&self) -> bool {
        self.select.iter().any(|s| s == "vulnerable")
    }

    /// Whether `--mode model` was asked: an agent repairs what an upgrade breaks.
    pub fn model(&self) -> bool {
        self.mode.as_deref() == Some("model")
    }

    /// Package names asked for (`--select NAME…`); empty for `all` and `vulnerable`.
    pub fn names(&self) -> Vec<String> {
        self.select
            .iter()
            .filter(|s| !matches!(s.as_str(), "all" | "vulnerable"))
            .cloned()
            .collect()
    }

    /// What was asked, as the result records it (`["all"]` by default).
    pub fn selection(&self) -> Vec<String> {
        if self.select.is_empty() {
            vec!["all".into()]
        } else {
            self.select.clone()
        }
    }

    /// A maintenance task's prompt: what was asked, in words (a task always has one).
    pub fn prompt(&self) -> String {
        format!(
            "maintain dependencies (select: {}; mode: {})",
            self.selection().join(" "),
            if self.model() { "model" } else { "baseline" }
        )
    }

    /// Refuses what cannot run: an unknown mode, `all` or `vulnerable` mixed with names, names
    /// that are no ecosystem's package name — a crate name, an npm name (`@types/node`,
    /// `lodash.merge`) or a Go module path (`golang.org/x/text`), by the rules the pipeline
    /// checks them with before they reach a URL or a command. Which ecosystem the repository
    /// is, is known only once it is pinned: a name of another ecosystem's is a notice then.
    pub fn check(&self) -> Result<(), String> {
        match self.mode.as_deref() {
            None | Some("baseline") | Some("model") => {}
            Some(other) => {
                return Err(format!(
                    "unknown maintenance mode {other:?}: expected baseline or model"
                ))
            }
        }
        let keywords = self
            .select
            .iter()
            .filter(|s| matches!(s.as_str(), "all" | "vulnerable"))
            .count();
        if keywords > 0 && self.select.len() > 1 {
            return Err("select takes all, vulnerable, or package names, not a mix of them".into());
        }
        if self.select.len() > 64 {
            return Err("select names at most 64 packages".into());
        }
        if let Some(bad) = self.names().into_iter().find(|name| !package_name(name)) {
            return Err(format!(
                "select: {bad:?} is not a package name (a crate name, an npm package name or a Go \
                 module path)"
            ));
        }
        Ok(())
    }
}

/// Whether `name` is a package name npm accepts: lowercase letters, digits and `-._~`, at most
/// 214 characters, optionally `@scope/` first; not starting with `.`, `_` or `-`.
pub fn check_npm_name(name: &str) -> Result<(), String> {
    let element = |part: &str| {
        !part.is_empty()
            && !part.starts_with(['.', '_', '-'])
            && part.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_' | '~')
            })
    };
    let valid = name.len() <= 214
        && match name.strip_prefix('@') {
            Some(scoped) => scoped
                .split_once('/')
                .is_some_and(|(scope, package)| element(scope) && element(package)),
            None => element(name),
        };
    if valid {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid npm package name"))
    }
}

/// Whether `path` is a module path Go accepts: `/`-separated elements of ASCII letters,
/// digits and `-._~`, none empty, none starting or ending with a dot, the path not starting
/// with `-` (a module path is given to `go get`, where it must not read as a flag).
pub fn check_go_module_path(path: &str) -> Result<(), String> {
    let valid = !path.is_empty()
        && !path.starts_with('-')
        && path.split('/').all(|element| {
            !element.is_empty()
                && !element.starts_with('.')
                && !element.ends_with('.')
                && element
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~'))
        });
    if valid {
        Ok(())
    } else {
        Err(format!("{path:?} is not a valid Go module path"))
    }
}

/// Whether `name` is a crate name, an npm package name or a Go module path.
fn package_name(name: &str) -> bool {
    // crates.io's rule: an ASCII letter first (never a flag's `-`), then letters, digits,
    // `-` and `_`.
    let crate_name = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    // Go module paths have no length rule of their own; npm's 214 bounds both.
    crate_name
        || (name.len() <= 214
            && (check_npm_name(name).is_ok() || check_go_module_path(name).is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(names: &[&str]) -> Result<(), String> {
        MaintainOptions {
            select: names.iter().map(|n| n.to_string()).collect(),
            ..MaintainOptions::default()
        }
        .check()
    }

    #[test]
    fn select_takes_crate_names_npm_names_and_go_module_paths() {
        for good in [
            "smallvec",
            "serde_json",
            "golang.org/x/text",
            "github.com/BurntSushi/toml",
            "example.com/m/v2",
            "@types/node",
            "lodash.merge",
            "left-pad",
        ] {
            assert_eq!(select(&[good]), Ok(()), "{good}");
        }
        assert_eq!(
            select(&["golang.org/x/text", "@types/node", "hyper"]),
            Ok(())
        );
        for bad in [
            "",
            "-x",
            "--help",
            "../x",
            "golang.org/../x",
            "a b",
            "x;rm",
            "@types",
            "example.com/x/",
            &"a".repeat(215),
        ] {
            let error = select(&[bad]).expect_err(bad);
            assert!(error.contains("is not a package name"), "{bad:?}: {error}");
        }
        assert!(select(&["all", "hyper"]).unwrap_err().contains("not a mix"));
    }
}
