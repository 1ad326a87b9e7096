//! Prices per million tokens and the cost of one response in integer micro-dollars. An unknown
//! model costs `Cost::Unknown`, never zero, so a money budget can refuse it.

use crate::config::Provider;
use serde::{Deserialize, Serialize};
use warden_runtime::{Cost, TokenUsage};

/// The price of every model whose id starts with `model_prefix`, in US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub provider: Provider,
    pub model_prefix: String,
    pub input_per_mtok_usd: f64,
    /// Prompt tokens read from the provider's cache.
    pub cached_input_per_mtok_usd: f64,
    /// Prompt tokens written to the cache for 5 minutes (Anthropic: 1.25x input; OpenAI
    /// charges none).
    pub cache_write_per_mtok_usd: f64,
    /// Prompt tokens written to the cache for an hour; `None`: twice the input price
    /// (Anthropic's multiplier).
    #[serde(default)]
    pub cache_write_1h_per_mtok_usd: Option<f64>,
    pub output_per_mtok_usd: f64,
}

/// Prices looked up by provider and longest matching model prefix.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: Vec<Price>,
}

impl PriceTable {
    pub fn new(prices: Vec<Price>) -> PriceTable {
        let mut table = PriceTable::default();
        for price in prices {
            table.insert(price);
        }
        table
    }

    /// A few well-known models.
    ///
    /// CHECK THESE FIGURES against the providers' pricing pages before relying on them: they were
    /// copied by hand and prices change. Long-context surcharges are not modelled; 1-hour cache
    /// writes cost twice the input price. Configuration can override any entry (`insert`).
    pub fn builtin() -> PriceTable {
        use Provider::{Anthropic, OpenAi};
        let p = |provider, prefix: &str, input, cached, write, output| Price {
            provider,
            model_prefix: prefix.to_string(),
            input_per_mtok_usd: input,
            cached_input_per_mtok_usd: cached,
            cache_write_per_mtok_usd: write,
            cache_write_1h_per_mtok_usd: None,
            output_per_mtok_usd: output,
        };
        PriceTable::new(vec![
            p(OpenAi, "gpt-5", 1.25, 0.125, 0.0, 10.0),
            p(OpenAi, "gpt-5.1", 1.25, 0.125, 0.0, 10.0),
            p(OpenAi, "gpt-5-mini", 0.25, 0.025, 0.0, 2.0),
            p(OpenAi, "gpt-5-nano", 0.05, 0.005, 0.0, 0.40),
            // The "pro" variants share a prefix with much cheaper models: listed so the longest
            // prefix never under-prices them.
            p(OpenAi, "gpt-5-pro", 15.0, 15.0, 0.0, 120.0),
            p(OpenAi, "gpt-4.1", 2.0, 0.50, 0.0, 8.0),
            p(OpenAi, "gpt-4.1-mini", 0.40, 0.10, 0.0, 1.60),
            p(OpenAi, "gpt-4.1-nano", 0.10, 0.025, 0.0, 0.40),
            p(OpenAi, "gpt-4o", 2.50, 1.25, 0.0, 10.0),
            p(OpenAi, "gpt-4o-mini", 0.15, 0.075, 0.0, 0.60),
            p(OpenAi, "o3", 2.0, 0.50, 0.0, 8.0),
            p(OpenAi, "o3-pro", 20.0, 20.0, 0.0, 80.0),
            p(OpenAi, "o3-mini", 1.10, 0.55, 0.0, 4.40),
            p(OpenAi, "o4-mini", 1.10, 0.275, 0.0, 4.40),
            p(Anthropic, "claude-opus-4", 15.0, 1.50, 18.75, 75.0),
            p(Anthropic, "claude-opus-4-5", 5.0, 0.50, 6.25, 25.0),
            p(Anthropic, "claude-sonnet-4", 3.0, 0.30, 3.75, 15.0),
            p(Anthropic, "claude-haiku-4-5", 1.0, 0.10, 1.25, 5.0),
            p(Anthropic, "claude-3-5-haiku", 0.80, 0.08, 1.0, 4.0),
        ])
    }

    /// Adds a price, replacing one with the same provider and prefix.
    pub fn insert(&mut self, price: Price) {
        self.prices.retain(|existing| {
            existing.provider != price.provider || existing.model_prefix != price.model_prefix
        });
        self.prices.push(price);
    }

    /// The price of `model`: the entry of `provider` with the longest prefix of it.
    pub fn lookup(&self, provider: Provider, model: &str) -> Option<&Price> {
        self.prices
            .iter()
            .filter(|price| price.provider == provider && model.starts_with(&price.model_prefix))
            .max_by_key(|price| price.model_prefix.len())
    }

    /// What `usage` cost on `model`, rounded to the nearest micro-dollar.
    ///
    /// `usage.input_tokens` counts every prompt token (see `TokenUsage`), so the uncached part is
    /// what remains after the cache reads and writes. For OpenAI (no cache writes) this is
    /// `(prompt - cached)*input + cached*cached_input + completion*output`; for Anthropic, whose
    /// `input_tokens` the client has grown by both cache counts, it is
    /// `input*input + cache_creation*write + cache_read*read + output*output`.
    pub fn cost(&self, provider: Provider, model: &str, usage: &TokenUsage) -> Cost {
        let Some(price) = self.lookup(provider, model) else {
            tracing::warn!(
                model = %format!("{provider}:{model}"),
                "no price known for this model: its cost is reported as unknown"
            );
            return Cost::Unknown;
        };
        cost_at(price, usage)
    }
}

/// What `usage` cost at `price` (see `PriceTable::cost`).
pub(crate) fn cost_at(price: &Price, usage: &TokenUsage) -> Cost {
    let uncached = usage
        .input_tokens
        .saturating_sub(usage.cached_input_tokens)
        .saturating_sub(usage.cache_write_tokens);
    let written_1h = usage.cache_write_1h_tokens.min(usage.cache_write_tokens);
    let written_5m = usage.cache_write_tokens - written_1h;
    let write_1h_price = price
        .cache_write_1h_per_mtok_usd
        .unwrap_or(2.0 * price.input_per_mtok_usd);
    // One dollar per million tokens is one micro-dollar per token.
    let micro_usd = uncached as f64 * price.input_per_mtok_usd
        + usage.cached_input_tokens as f64 * price.cached_input_per_mtok_usd
        + written_5m as f64 * price.cache_write_per_mtok_usd
        + written_1h as f64 * write_1h_price
        + usage.output_tokens as f64 * price.output_per_mtok_usd;
    Cost::Known {
        micro_usd: micro_usd.round().max(0.0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cached: u64, write: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            cached_input_tokens: cached,
            cache_write_tokens: write,
            output_tokens: output,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
        }
    }

    fn price(
        provider: Provider,
        prefix: &str,
        input: f64,
        cached: f64,
        write: f64,
        output: f64,
    ) -> Price {
        Price {
            provider,
            model_prefix: prefix.into(),
            input_per_mtok_usd: input,
            cached_input_per_mtok_usd: cached,
            cache_write_per_mtok_usd: write,
            cache_write_1h_per_mtok_usd: None,
            output_per_mtok_usd: output,
        }
    }

    #[test]
    fn openai_cost_charges_cached_prompt_tokens_at_the_cached_rate() {
        let table = PriceTable::new(vec![price(Provider::OpenAi, "gpt-x", 2.0, 0.5, 0.0, 8.0)]);
        // (1000 - 400) * 2 + 400 * 0.5 + 300 * 8 = 1200 + 200 + 2400
        assert_eq!(
            table.cost(Provider::OpenAi, "gpt-x", &usage(1000, 400, 0, 300)),
            Cost::Known { micro_usd: 3800 }
        );
    }

    #[test]
    fn anthropic_cost_charges_each_kind_of_prompt_token_at_its_rate() {
        let table = PriceTable::new(vec![price(
            Provider::Anthropic,
            "claude-x",
            3.0,
            0.3,
            3.75,
            15.0,
        )]);
        // provider usage: input 100, cache_creation 2000, cache_read 10000, output 500
        // → TokenUsage input = 12100 (all prompt tokens), cached 10000, write 2000
        // 100*3 + 2000*3.75 + 10000*0.3 + 500*15 = 300 + 7500 + 3000 + 7500
        assert_eq!(
            table.cost(
                Provider::Anthropic,
                "claude-x-2025",
                &usage(12_100, 10_000, 2_000, 500)
            ),
            Cost::Known { micro_usd: 18_300 }
        );
    }

    #[test]
    fn one_hour_cache_writes_cost_twice_the_input_price_unless_priced() {
        let mut price = price(Provider::Anthropic, "claude-x", 3.0, 0.3, 3.75, 15.0);
        // 100 uncached, 10000 read, 2000 written of which 1500 for an hour, 500 out:
        // 100*3 + 10000*0.3 + 500*3.75 + 1500*6 + 500*15 = 300 + 3000 + 1875 + 9000 + 7500
        let usage = TokenUsage {
            cache_write_1h_tokens: 1_500,
            ..usage(12_100, 10_000, 2_000, 500)
        };
        let table = PriceTable::new(vec![price.clone()]);
        assert_eq!(
            table.cost(Provider::Anthropic, "claude-x", &usage),
            Cost::Known { micro_usd: 21_675 }
        );
        price.cache_write_1h_per_mtok_usd = Some(5.0);
        let table = PriceTable::new(vec![price]);
        assert_eq!(
            table.cost(Provider::Anthropic, "claude-x", &usage),
            Cost::Known { micro_usd: 20_175 }
        );
    }

    #[test]
    fn cost_rounds_to_the_nearest_micro_dollar_and_is_exact_for_large_counts() {
        let table = PriceTable::new(vec![price(Provider::OpenAi, "m", 0.15, 0.075, 0.0, 0.6)]);
        assert_eq!(
            table.cost(Provider::OpenAi, "m", &usage(3, 0, 0, 1)),
            Cost::Known { micro_usd: 1 } // 0.45 + 0.6 = 1.05
        );
        assert_eq!(
            table.cost(Provider::OpenAi, "m", &usage(10_000_000, 0, 0, 1_000_000)),
            Cost::Known {
                micro_usd: 2_100_000
            } // $1.50 + $0.60
        );
    }

    #[test]
    fn unknown_models_and_other_providers_cost_unknown_never_zero() {
        let table = PriceTable::builtin();
        assert_eq!(
            table.cost(Provider::OpenAi, "llama3.1:8b", &usage(10, 0, 0, 10)),
            Cost::Unknown
        );
        // a price for the same id under another provider does not apply
        assert_eq!(
            table.cost(Provider::Anthropic, "gpt-5.1", &usage(10, 0, 0, 10)),
            Cost::Unknown
        );
    }

    #[test]
    fn the_longest_prefix_wins() {
        let table = PriceTable::builtin();
        let prefix = |provider, model| {
            table
                .lookup(provider, model)
                .map(|price| price.model_prefix.as_str())
        };
        assert_eq!(
            prefix(Provider::OpenAi, "gpt-5-mini-2025-08-07"),
            Some("gpt-5-mini")
        );
        assert_eq!(prefix(Provider::OpenAi, "gpt-5.1-codex"), Some("gpt-5.1"));
        assert_eq!(prefix(Provider::OpenAi, "gpt-5"), Some("gpt-5"));
        assert_eq!(prefix(Provider::OpenAi, "o3-pro"), Some("o3-pro"));
        assert_eq!(
            prefix(Provider::Anthropic, "claude-opus-4-5-20251101"),
            Some("claude-opus-4-5")
        );
        assert_eq!(
            prefix(Provider::Anthropic, "claude-opus-4-1"),
            Some("claude-opus-4")
        );
    }

    #[test]
    fn insert_replaces_the_same_prefix() {
        let mut table = PriceTable::builtin();
        table.insert(price(Provider::OpenAi, "gpt-5", 9.0, 9.0, 0.0, 9.0));
        assert_eq!(
            table
                .lookup(Provider::OpenAi, "gpt-5")
                .map(|p| p.input_per_mtok_usd),
            Some(9.0)
        );
        assert_eq!(
            table
                .prices
                .iter()
                .filter(|p| p.model_prefix == "gpt-5")
                .count(),
            1
        );
    }
}
