//! What a `maintain` task upgrades and how ([`MaintainOptions`]), kept with the task's options
//! ([`crate::change::ChangeOptions`]) and in `[[schedules]]`; a leaf module, so the
//! configuration can check a schedule's selection without depending on the change pipeline.

/// What a `maintain` task upgrades (`--select`) and how (`--mode`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintainOptions {
    /// `all` (default), `vulnerable`, or package names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<String>,
    /// `baseline` (default): deterministic, no model, stops at the first failing check.
    /// `model`: an agent repairs the code an upgrade breaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
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

    /// Refuses what cannot run: an unknown mode, `all` or
    /// `vulnerable` mixed with names, names that are not crate names.
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
        if let Some(bad) = self.names().into_iter().find(|name| {
            name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        }) {
            return Err(format!("select: {bad:?} is not a crate name"));
        }
        Ok(())
    }
}
