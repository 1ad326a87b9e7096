//! `[serve]`, `[web]`, `[callbacks]` and `[telemetry]`: the service `warden serve` runs.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// Concurrent runs per worker process (default 2).
    pub workers: Option<usize>,
    /// How long a claimed run stays leased without a heartbeat (default 30 s); a worker that
    /// dies loses its runs after this.
    pub lease_secs: Option<u64>,
    /// How long `warden serve` lets running tasks finish at shutdown before releasing them back
    /// to the queue (default 10 s).
    pub shutdown_grace_secs: Option<u64>,
    /// Tokens (input + output) all tasks together may spend per UTC day.
    pub max_tokens_per_day: Option<u64>,
    /// Dollars all tasks together may spend per UTC day.
    pub max_cost_usd_per_day: Option<f64>,
    /// API requests each token may make per minute on average (default 600).
    pub rate_limit_per_minute: Option<u32>,
    /// API requests a token may make at once before the per-minute rate applies (default 120).
    pub rate_limit_burst: Option<u32>,
    /// Open API connections at most (default: from the open-file limit, see
    /// `warden_api::connections::connection_cap`); only lowers that.
    pub max_connections: Option<usize>,
    /// Seconds a client has to send a request head in full (default 10).
    pub header_timeout_secs: Option<u64>,
    /// Seconds an idle kept-alive connection stays open (default 60).
    pub keep_alive_secs: Option<u64>,
    /// Event streams one token may hold open at once (default 16); beyond, 429.
    pub max_streams_per_token: Option<u32>,
    /// Host names (optionally `name:port`) clients may use besides the listen address, e.g. the
    /// name of a reverse proxy in front: other `Host`s get 421, other `Origin`s 403.
    pub public_names: Option<Vec<String>>,
    /// Reverse proxies (IP addresses or CIDR blocks) whose `X-Forwarded-For`/`Forwarded`
    /// headers name the client; from any other peer those headers are ignored.
    pub trusted_proxies: Option<Vec<String>>,
}

/// The `[web]` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    /// Serve the web console at `/` (default true).
    pub enabled: Option<bool>,
    /// How long a console session lasts after sign-in, in hours (default 12, at most 720).
    pub session_hours: Option<u64>,
}

/// `[callbacks]` in `warden.toml`. Its `Debug` never shows the secret.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackSection {
    /// The HMAC key, at least 32 bytes; `WARDEN_CALLBACK_SECRET` overrides.
    pub secret: Option<String>,
    /// Origins (`https://host[:port]`) callbacks may go to; nothing else is accepted.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Allow `http://` origins (for receivers on a trusted network only).
    pub allow_http: Option<bool>,
    /// Deliveries tried before an event's callback fails for good (default 8).
    pub max_attempts: Option<u32>,
    /// Seconds one delivery may take (default 10, at most 30).
    pub timeout_secs: Option<u64>,
}

impl std::fmt::Debug for CallbackSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSection")
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("allowed_origins", &self.allowed_origins)
            .field("allow_http", &self.allow_http)
            .field("max_attempts", &self.max_attempts)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP base URL.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported resource.
    pub service_name: Option<String>,
}
