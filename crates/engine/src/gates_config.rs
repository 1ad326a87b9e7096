//! `[gates]` and `[roles]`: what the risk gate does at each level (`crate::gates`), whether a
//! reviewer judges a change whose checks passed and what its findings do, and which model the
//! reviewer uses.

use anyhow::bail;
use warden_config::{GatesSection, RolesSection};
use warden_protocol::GateAction;

use crate::gates::{parse_action, GatePolicy};

/// `[roles]`' explorers, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExplorerSettings {
    /// Explorers one run may send; 0: no `explore` tool.
    pub max: u32,
    /// Model calls each may make (within what its parent has left).
    pub max_turns: u32,
}

impl ExplorerSettings {
    pub const DEFAULT: ExplorerSettings = ExplorerSettings {
        max: 3,
        max_turns: 12,
    };

    pub fn resolve(section: &RolesSection) -> anyhow::Result<ExplorerSettings> {
        let max = section.max_explorers.unwrap_or(Self::DEFAULT.max);
        if max > 16 {
            anyhow::bail!("roles.max_explorers {max}: expected 0 (none) to 16");
        }
        let max_turns = section
            .explorer_max_turns
            .unwrap_or(Self::DEFAULT.max_turns);
        if !(2..=100).contains(&max_turns) {
            anyhow::bail!(
                "roles.explorer_max_turns {max_turns}: expected 2 to 100 (an explorer needs a \
                 call to look and one to answer)"
            );
        }
        Ok(ExplorerSettings { max, max_turns })
    }
}

/// What the reviewer's blocking findings do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewMode {
    Off,
    Report,
    Block,
    SendBack,
}

impl ReviewMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewMode::Off => "off",
            ReviewMode::Report => "report",
            ReviewMode::Block => "block",
            ReviewMode::SendBack => "send_back",
        }
    }
}

/// `[gates]`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GatesConfig {
    pub policy: GatePolicy,
    pub review: ReviewMode,
    pub review_rounds: u32,
    pub review_confidence: f64,
}

impl Default for GatesConfig {
    fn default() -> Self {
        GatesConfig {
            policy: GatePolicy::default(),
            review: ReviewMode::Off,
            review_rounds: 1,
            review_confidence: 0.0,
        }
    }
}

impl GatesConfig {
    pub fn resolve(section: &GatesSection) -> anyhow::Result<GatesConfig> {
        let defaults = GatesConfig::default();
        let action = |key: &str, value: &Option<String>, default: GateAction| match value {
            None => Ok(default),
            Some(text) => parse_action(text).ok_or_else(|| {
                anyhow::anyhow!(
                    "gates.{key} must be run, approve_proposal or approve_before_run, got {text:?}"
                )
            }),
        };
        let policy = GatePolicy {
            low: action("low", &section.low, defaults.policy.low)?,
            medium: action("medium", &section.medium, defaults.policy.medium)?,
            high: action("high", &section.high, defaults.policy.high)?,
        };
        let review = match section.review.as_deref() {
            None => defaults.review,
            Some(text) => [
                ReviewMode::Off,
                ReviewMode::Report,
                ReviewMode::Block,
                ReviewMode::SendBack,
            ]
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "gates.review must be off, report, block or send_back, got {text:?}"
                )
            })?,
        };
        let review_rounds = section.review_rounds.unwrap_or(defaults.review_rounds);
        if review_rounds > 5 {
            bail!("gates.review_rounds must be at most 5, got {review_rounds}");
        }
        let review_confidence = section
            .review_confidence
            .unwrap_or(defaults.review_confidence);
        if !(0.0..=1.0).contains(&review_confidence) {
            bail!("gates.review_confidence must be between 0 and 1, got {review_confidence}");
        }
        Ok(GatesConfig {
            policy,
            review,
            review_rounds,
            review_confidence,
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn explorers_default_to_three_of_twelve_calls_and_refuse_what_cannot_work() {
        let resolve = |max, turns| {
            ExplorerSettings::resolve(&RolesSection {
                reviewer: None,
                max_explorers: max,
                explorer_max_turns: turns,
            })
        };
        assert_eq!(resolve(None, None).unwrap(), ExplorerSettings::DEFAULT);
        assert_eq!(resolve(Some(0), None).unwrap().max, 0);
        let error = resolve(Some(17), None).unwrap_err().to_string();
        assert!(error.contains("roles.max_explorers 17"), "{error}");
        let error = resolve(None, Some(1)).unwrap_err().to_string();
        assert!(error.contains("roles.explorer_max_turns 1"), "{error}");
    }

    use super::*;

    fn parse(text: &str) -> anyhow::Result<GatesConfig> {
        let section: GatesSection = toml::from_str(text)?;
        GatesConfig::resolve(&section)
    }

    #[test]
    fn defaults_run_everything_and_review_nothing() {
        let config = parse("").unwrap();
        assert_eq!(config, GatesConfig::default());
        assert_eq!(config.policy.high, GateAction::ApproveProposal);
        assert_eq!(config.review, ReviewMode::Off);
    }

    #[test]
    fn each_key_is_read_and_bad_values_are_named() {
        let config = parse(
            "low = \"run\"\nmedium = \"approve_proposal\"\nhigh = \"approve_before_run\"\n\
             review = \"send_back\"\nreview_rounds = 2\nreview_confidence = 0.5\n",
        )
        .unwrap();
        assert_eq!(config.policy.medium, GateAction::ApproveProposal);
        assert_eq!(config.policy.high, GateAction::ApproveBeforeRun);
        assert_eq!(config.review, ReviewMode::SendBack);
        assert_eq!((config.review_rounds, config.review_confidence), (2, 0.5));
        for (text, named) in [
            ("high = \"approve\"", "gates.high"),
            ("review = \"loud\"", "gates.review"),
            ("review_rounds = 9", "gates.review_rounds"),
            ("review_confidence = 1.5", "gates.review_confidence"),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(named), "{text}: {error}");
        }
        assert!(parse("lo = \"run\"").is_err());
    }
}
