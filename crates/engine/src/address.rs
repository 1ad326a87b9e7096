//! Which addresses a callback may connect to, checked where the connection is made.
//!
//! - [`is_public`]: globally routable unicast only. Refused: unspecified, `0.0.0.0/8`, loopback,
//!   private (`10/8`, `172.16/12`, `192.168/16`), CGNAT `100.64/10`, link-local (`169.254/16`,
//!   `fe80::/10`), unique-local `fc00::/7`, site-local `fec0::/10`, multicast, broadcast,
//!   reserved `240/4`, benchmarking `198.18/15`, IETF `192.0.0/24`, the documentation ranges,
//!   IPv4-mapped and IPv4-compatible IPv6, everything outside `2000::/3` but NAT64
//!   `64:ff9b::/96` of a public IPv4 address, 6to4 `2002::/16` of a non-public one, and the
//!   IETF protocol block `2001::/23` (Teredo embeds addresses too).
//! - [`CheckedResolver`]: reqwest's resolver for callback requests. It resolves a name and
//!   drops every address the [`AddressPolicy`] refuses, so the address reqwest connects to is
//!   an address that was checked: a name that resolves to a public address once and to
//!   `127.0.0.1` on the next lookup (DNS rebinding) gains nothing.
//! - IP-literal hosts never reach a resolver; the sender checks them with
//!   [`AddressPolicy::check`] after WHATWG parsing has normalised forms such as `127.1`,
//!   `0x7f000001` or `2130706433`.

use std::collections::HashSet;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `ip` is a globally routable unicast address a callback may reach.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, network: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(network)) & mask
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    const REFUSED: &[([u8; 4], u32)] = &[
        ([0, 0, 0, 0], 8),       // "this network", unspecified
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // carrier-grade NAT
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local (cloud metadata)
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // documentation
        ([203, 0, 113, 0], 24),  // documentation
        ([224, 0, 0, 0], 4),     // multicast
        ([240, 0, 0, 0], 4),     // reserved, broadcast
    ];
    !REFUSED
        .iter()
        .any(|(network, prefix)| in_v4(ip, *network, *prefix))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let bits = u128::from(ip);
    let in_v6 = |network: u128, prefix: u32| {
        let mask = u128::MAX << (128 - prefix);
        bits & mask == network & mask
    };
    let embedded_v4 = |low: u128| Ipv4Addr::from((low & 0xffff_ffff) as u32);
    // NAT64 (RFC 6052 well-known prefix): as public as the IPv4 address it carries.
    if in_v6(0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) {
        return is_public_v4(embedded_v4(bits));
    }
    // Only global unicast; this also refuses ::, ::1, IPv4-mapped (::ffff:0:0/96) and
    // IPv4-compatible (::/96) addresses, unique-local, link-local, site-local and multicast.
    if segments[0] & 0xe000 != 0x2000 {
        return false;
    }
    // 6to4: the IPv4 address sits in bits 16..48.
    if segments[0] == 0x2002 {
        return is_public_v4(embedded_v4(bits >> 80));
    }
    const REFUSED: &[(u128, u32)] = &[
        (0x2001_0000_0000_0000_0000_0000_0000_0000, 23), // IETF protocol block, Teredo
        (0x2001_0db8_0000_0000_0000_0000_0000_0000, 32), // documentation
        (0x3fff_0000_0000_0000_0000_0000_0000_0000, 20), // documentation
    ];
    !REFUSED
        .iter()
        .any(|(network, prefix)| in_v6(*network, *prefix))
}

/// The addresses callbacks may connect to: public ones, plus — only for tests, never from
/// configuration — exact socket addresses named in code (a local receiver).
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    also_allowed: Arc<HashSet<SocketAddr>>,
}

impl AddressPolicy {
    /// Public addresses only: what `warden serve` uses.
    pub fn public_only() -> AddressPolicy {
        AddressPolicy::default()
    }

    /// Public addresses and exactly these socket addresses (tests: a receiver on
    /// `127.0.0.1:port`). An address is matched as written: `127.0.0.1:8080` does not admit
    /// `[::ffff:127.0.0.1]:8080` nor another port (except in the resolver, which sees no
    /// port and admits the listed IP addresses).
    pub fn public_and(addresses: impl IntoIterator<Item = SocketAddr>) -> AddressPolicy {
        AddressPolicy {
            also_allowed: Arc::new(addresses.into_iter().collect()),
        }
    }

    /// `Ok` if a callback may connect to `address`; else why not.
    pub fn check(&self, address: SocketAddr) -> Result<(), String> {
        if is_public(address.ip()) || self.also_allowed.contains(&address) {
            Ok(())
        } else {
            Err(format!("{} is not a public address", address.ip()))
        }
    }

    fn admits_ip(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.also_allowed.iter().any(|a| a.ip() == ip)
    }
}

/// A boxed, sendable future.
pub type LookupFuture<'a> = Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Name resolution under the policy: the system resolver in production, a table in tests.
pub trait Lookup: Send + Sync {
    fn lookup(&self, host: String) -> LookupFuture<'static>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> LookupFuture<'static> {
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addresses.map(|a| a.ip()).collect())
        })
    }
}

/// reqwest's resolver for callbacks: resolves, then keeps only addresses the policy admits.
pub struct CheckedResolver {
    lookup: Arc<dyn Lookup>,
    policy: AddressPolicy,
}

impl CheckedResolver {
    pub fn new(lookup: Arc<dyn Lookup>, policy: AddressPolicy) -> CheckedResolver {
        CheckedResolver { lookup, policy }
    }
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let lookup = self.lookup.lookup(host.clone());
        let policy = self.policy.clone();
        Box::pin(async move {
            let found = lookup.await?;
            let (admitted, refused): (Vec<IpAddr>, Vec<IpAddr>) =
                found.into_iter().partition(|ip| policy.admits_ip(*ip));
            if admitted.is_empty() {
                let refused: Vec<String> = refused.iter().map(IpAddr::to_string).collect();
                return Err(format!(
                    "callback host {host} resolves to no public address (refused: {})",
                    if refused.is_empty() {
                        "none found".to_string()
                    } else {
                        refused.join(", ")
                    }
                )
                .into());
            }
            let addresses: Addrs = Box::new(admitted.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(address: &str, public: bool) {
        let ip: IpAddr = address.parse().unwrap();
        assert_eq!(is_public(ip), public, "{address}");
    }

    #[test]
    fn only_global_unicast_is_public() {
        for refused in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.255.255",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
            "3fff::1",
            "fc00::1",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            check(refused, false);
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            check(public, true);
        }
    }

    #[test]
    fn extra_addresses_match_exactly() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let policy = AddressPolicy::public_and([local]);
        assert!(policy.check(local).is_ok());
        assert!(policy.check("127.0.0.1:8081".parse().unwrap()).is_err());
        assert!(policy
            .check("[::ffff:127.0.0.1]:8080".parse().unwrap())
            .is_err());
        assert!(AddressPolicy::public_only().check(local).is_err());
        assert!(AddressPolicy::public_only()
            .check("8.8.8.8:443".parse().unwrap())
            .is_ok());
    }

    struct Table(Vec<IpAddr>);
    impl Lookup for Table {
        fn lookup(&self, _host: String) -> LookupFuture<'static> {
            let found = self.0.clone();
            Box::pin(async move { Ok(found) })
        }
    }

    fn resolve(found: &[&str]) -> Result<Vec<SocketAddr>, String> {
        let resolver = CheckedResolver::new(
            Arc::new(Table(found.iter().map(|a| a.parse().unwrap()).collect())),
            AddressPolicy::public_only(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(resolver.resolve("hooks.example.com".parse().unwrap()))
            .map(|addresses| addresses.collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_resolver_drops_every_non_public_address() {
        assert_eq!(
            resolve(&["127.0.0.1", "93.184.216.34", "10.0.0.1"]).unwrap(),
            vec!["93.184.216.34:0".parse().unwrap()]
        );
        let error = resolve(&["127.0.0.1", "::ffff:169.254.169.254"]).unwrap_err();
        assert!(
            error.contains("no public address") && error.contains("127.0.0.1"),
            "{error}"
        );
        assert!(resolve(&[]).is_err());
    }
}
