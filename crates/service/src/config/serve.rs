//! The `[serve]` section of `warden.toml`: how the service runs tasks (concurrent runs per worker,
//! lease length, shutdown grace), the per-UTC-day budgets its workers check from the usage
//! ledger before every model call, and how the API holds connections (cap, timeouts, event
//! streams per token, the public names it answers to, the reverse proxies whose forwarding
//! headers it believes). The per-task budgets are `[limits]`, counted across runs.

use anyhow::bail;
use std::net::IpAddr;
use std::time::Duration;

use warden_config::{ServeSection, WebSection};
/// `host[:port]` as the API's `Host` and `Origin` checks read it.
pub use warden_engine::authority::{parse_authority, Authority};

/// The default header-read timeout of an API connection.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default idle keep-alive timeout of an API connection.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(60);

/// An IP address or a CIDR block (`10.0.0.0/8`, `fd00::/8`) of `[serve] trusted_proxies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

/// An IPv4-mapped IPv6 address (a v4 peer of a dual-stack listener) as the IPv4 one.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

impl IpRange {
    /// `address` or `address/prefix`, with no bits set after the prefix; `None` otherwise.
    pub fn parse(text: &str) -> Option<IpRange> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let network = canonical_ip(address.parse::<IpAddr>().ok()?);
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) if prefix.bytes().all(|b| b.is_ascii_digit()) && !prefix.is_empty() => {
                prefix.parse::<u8>().ok().filter(|p| *p <= bits)?
            }
            Some(_) => return None,
        };
        let range = IpRange { network, prefix };
        (range.mask(network) == Some(network_bits(network))).then_some(range)
    }

    /// The address's bits under this range's prefix, or `None` for the other family.
    fn mask(&self, ip: IpAddr) -> Option<u128> {
        let (bits, width) = match (self.network, canonical_ip(ip)) {
            (IpAddr::V4(_), IpAddr::V4(ip)) => (u128::from(u32::from(ip)), 32),
            (IpAddr::V6(_), IpAddr::V6(ip)) => (u128::from(ip), 128),
            _ => return None,
        };
        let host_bits = width - u32::from(self.prefix);
        Some(if host_bits >= 128 {
            0
        } else {
            (bits >> host_bits) << host_bits
        })
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.mask(ip) == Some(network_bits(self.network))
    }
}

fn network_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(ip) => u128::from(u32::from(ip)),
        IpAddr::V6(ip) => u128::from(ip),
    }
}

impl std::fmt::Display for IpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// How many requests a token may make: `per_minute` on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_minute: u32,
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> RateLimit {
        RateLimit {
            per_minute: 600,
            burst: 120,
        }
    }
}

/// Event streams a token may hold open at once by default.
pub const DEFAULT_MAX_STREAMS_PER_TOKEN: u32 = 16;

/// The `[serve]` section, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    pub workers: usize,
    pub lease: Duration,
    pub shutdown_grace: Duration,
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_micro_usd_per_day: Option<u64>,
    /// Per-token API rate limit.
    pub rate_limit: RateLimit,
    /// `max_connections` when set; otherwise the cap comes from the open-file limit.
    pub max_connections: Option<usize>,
    pub header_timeout: Duration,
    pub keep_alive: Duration,
    pub max_streams_per_token: u32,
    /// Lowercase, without a trailing dot.
    pub public_names: Vec<String>,
    /// The peers whose forwarding headers name the client.
    pub trusted_proxies: Vec<IpRange>,
    /// `[web]`: the console `warden serve` serves at `/`.
    pub web: WebConfig,
}

/// The `[web]` section, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebConfig {
    pub enabled: bool,
    pub session_lifetime: Duration,
}

/// How long a console session lasts by default.
pub const DEFAULT_SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

impl Default for WebConfig {
    fn default() -> WebConfig {
        WebConfig {
            enabled: true,
            session_lifetime: DEFAULT_SESSION_LIFETIME,
        }
    }
}

impl WebConfig {
    pub fn resolve(section: &WebSection) -> anyhow::Result<WebConfig> {
        let session_lifetime = match section.session_hours {
            Some(0) => bail!("web.session_hours must be at least 1"),
            Some(hours) if hours > 720 => {
                bail!("web.session_hours must be at most 720 (30 days), got {hours}")
            }
            Some(hours) => Duration::from_secs(hours * 3600),
            None => DEFAULT_SESSION_LIFETIME,
        };
        Ok(WebConfig {
            enabled: section.enabled.unwrap_or(true),
            session_lifetime,
        })
    }
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            workers: 2,
            lease: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            max_tokens_per_day: None,
            max_cost_micro_usd_per_day: None,
            rate_limit: RateLimit::default(),
            max_connections: None,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            keep_alive: DEFAULT_KEEP_ALIVE,
            max_streams_per_token: DEFAULT_MAX_STREAMS_PER_TOKEN,
            public_names: Vec::new(),
            trusted_proxies: Vec::new(),
            web: WebConfig::default(),
        }
    }
}

impl ServeConfig {
    pub fn resolve(section: &ServeSection) -> anyhow::Result<ServeConfig> {
        let defaults = ServeConfig::default();
        let workers = match section.workers {
            Some(0) => bail!("serve.workers must be at least 1"),
            Some(n) if n > 256 => bail!("serve.workers must be at most 256, got {n}"),
            Some(n) => n,
            None => defaults.workers,
        };
        let lease = match section.lease_secs {
            Some(0) => bail!("serve.lease_secs must be at least 1"),
            Some(secs) if secs > 86_400 => bail!("serve.lease_secs must be at most 86400"),
            Some(secs) => Duration::from_secs(secs),
            None => defaults.lease,
        };
        let shutdown_grace = match section.shutdown_grace_secs {
            Some(secs) if secs > 3_600 => bail!("serve.shutdown_grace_secs must be at most 3600"),
            Some(secs) => Duration::from_secs(secs),
            None => defaults.shutdown_grace,
        };
        if section.max_tokens_per_day == Some(0) {
            bail!("serve.max_tokens_per_day must be at least 1");
        }
        let max_cost_micro_usd_per_day = match section.max_cost_usd_per_day {
            Some(usd) if !(usd.is_finite() && usd > 0.0) => {
                bail!("serve.max_cost_usd_per_day must be a positive number of dollars, got {usd}")
            }
            Some(usd) => Some((usd * 1e6).round() as u64),
            None => None,
        };
        if section.rate_limit_per_minute == Some(0) {
            bail!("serve.rate_limit_per_minute must be at least 1");
        }
        if section.rate_limit_burst == Some(0) {
            bail!("serve.rate_limit_burst must be at least 1");
        }
        let rate_limit = RateLimit {
            per_minute: section
                .rate_limit_per_minute
                .unwrap_or(defaults.rate_limit.per_minute),
            burst: section
                .rate_limit_burst
                .unwrap_or(defaults.rate_limit.burst),
        };
        if section.max_connections == Some(0) {
            bail!("serve.max_connections must be at least 1");
        }
        let seconds = |value: Option<u64>, name: &str, default: Duration| match value {
            Some(secs) if !(1..=3_600).contains(&secs) => {
                bail!("serve.{name} must be between 1 and 3600, got {secs}")
            }
            Some(secs) => Ok(Duration::from_secs(secs)),
            None => Ok(default),
        };
        let header_timeout = seconds(
            section.header_timeout_secs,
            "header_timeout_secs",
            defaults.header_timeout,
        )?;
        let keep_alive = seconds(
            section.keep_alive_secs,
            "keep_alive_secs",
            defaults.keep_alive,
        )?;
        if section.max_streams_per_token == Some(0) {
            bail!("serve.max_streams_per_token must be at least 1");
        }
        let mut public_names = Vec::new();
        for name in section.public_names.iter().flatten() {
            match warden_engine::authority::normalize_public_name(name) {
                Some(name) => public_names.push(name),
                None => bail!(
                    "serve.public_names: {name:?} is not a host name or name:port \
                     (no scheme, no path)"
                ),
            }
        }
        let mut trusted_proxies = Vec::new();
        for entry in section.trusted_proxies.iter().flatten() {
            match IpRange::parse(entry) {
                Some(range) => trusted_proxies.push(range),
                None => bail!(
                    "serve.trusted_proxies: {entry:?} is not an IP address or a CIDR block \
                     (10.0.0.5, 10.0.0.0/8, fd00::/8; no bits after the prefix)"
                ),
            }
        }
        Ok(ServeConfig {
            workers,
            lease,
            shutdown_grace,
            max_tokens_per_day: section.max_tokens_per_day,
            max_cost_micro_usd_per_day,
            rate_limit,
            max_connections: section.max_connections,
            header_timeout,
            keep_alive,
            max_streams_per_token: section
                .max_streams_per_token
                .unwrap_or(defaults.max_streams_per_token),
            public_names,
            trusted_proxies,
            web: WebConfig::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_web_section_defaults_on_and_bounds_session_hours() {
        let web = |text: &str| WebConfig::resolve(&toml::from_str::<WebSection>(text)?);
        assert_eq!(web("").unwrap(), WebConfig::default());
        assert!(WebConfig::default().enabled);
        let off = web("enabled = false\nsession_hours = 2").unwrap();
        assert!(!off.enabled);
        assert_eq!(off.session_lifetime, Duration::from_secs(7200));
        for bad in ["session_hours = 0", "session_hours = 721", "colour = 1"] {
            assert!(web(bad).is_err(), "{bad}");
        }
    }

    fn resolve(text: &str) -> anyhow::Result<ServeConfig> {
        let section: ServeSection = toml::from_str(text)?;
        ServeConfig::resolve(&section)
    }

    #[test]
    fn defaults_bounds_and_unknown_keys() {
        assert_eq!(resolve("").unwrap(), ServeConfig::default());
        let config = resolve("workers = 4\nlease_secs = 5\nmax_cost_usd_per_day = 2.5\n").unwrap();
        assert_eq!(config.workers, 4);
        assert_eq!(config.lease, Duration::from_secs(5));
        assert_eq!(config.max_cost_micro_usd_per_day, Some(2_500_000));
        assert_eq!(config.rate_limit, RateLimit::default());
        let limited = resolve("rate_limit_per_minute = 30\nrate_limit_burst = 5\n").unwrap();
        assert_eq!(
            limited.rate_limit,
            RateLimit {
                per_minute: 30,
                burst: 5
            }
        );
        let front = resolve(
            "max_connections = 100\nheader_timeout_secs = 2\nkeep_alive_secs = 5\n\
             max_streams_per_token = 3\npublic_names = [\"Warden.Example.com.\", \"proxy:8443\"]\n",
        )
        .unwrap();
        assert_eq!(front.max_connections, Some(100));
        assert_eq!(front.header_timeout, Duration::from_secs(2));
        assert_eq!(front.keep_alive, Duration::from_secs(5));
        assert_eq!(front.max_streams_per_token, 3);
        assert_eq!(front.public_names, ["warden.example.com", "proxy:8443"]);
        for bad in [
            "max_connections = 0",
            "header_timeout_secs = 0",
            "keep_alive_secs = 100000",
            "max_streams_per_token = 0",
            "public_names = [\"https://warden.example.com\"]",
            "public_names = [\"warden.example.com/api\"]",
            "public_names = [\"\"]",
            "rate_limit_per_minute = 0",
            "rate_limit_burst = 0",
            "rate_limit_burst = -1",
            "workers = 0",
            "lease_secs = 0",
            "max_tokens_per_day = 0",
            "max_cost_usd_per_day = -1.0",
            "wrokers = 2",
        ] {
            assert!(resolve(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn trusted_proxies_are_addresses_or_cidr_blocks() {
        let config = resolve(
            "trusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"fd00::/8\", \"::1\", \"0.0.0.0/0\"]",
        )
        .unwrap();
        let ranges = &config.trusted_proxies;
        assert_eq!(ranges.len(), 5);
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert!(ranges[0].contains(ip("127.0.0.1")));
        assert!(ranges[0].contains(ip("::ffff:127.0.0.1")), "v4-mapped");
        assert!(!ranges[0].contains(ip("127.0.0.2")));
        assert!(ranges[1].contains(ip("10.255.1.2")));
        assert!(!ranges[1].contains(ip("11.0.0.1")));
        assert!(!ranges[1].contains(ip("::a00:1")), "another family");
        assert!(ranges[2].contains(ip("fd12:3456::1")));
        assert!(!ranges[2].contains(ip("fe80::1")));
        assert!(ranges[3].contains(ip("::1")));
        assert!(ranges[4].contains(ip("203.0.113.9")));
        assert_eq!(ranges[1].to_string(), "10.0.0.0/8");
        assert!(resolve("").unwrap().trusted_proxies.is_empty());
        for bad in [
            "trusted_proxies = [\"proxy.internal\"]",
            "trusted_proxies = [\"10.0.0.1/8\"]",
            "trusted_proxies = [\"10.0.0.0/33\"]",
            "trusted_proxies = [\"10.0.0.0/\"]",
            "trusted_proxies = [\"10.0.0.0/+8\"]",
            "trusted_proxies = [\"fd00::/129\"]",
            "trusted_proxies = [\"\"]",
            "trusted_proxies = \"10.0.0.1\"",
        ] {
            assert!(resolve(bad).is_err(), "{bad}");
        }
    }
}
