//! The client address of a request, for throttling failed authentications and for the
//! address a console session records.
//!
//! It is the TCP peer's, unless the peer is one of `[serve] trusted_proxies`: then it is read
//! from the forwarding header, walking its hops from the right (the one the trusted proxy
//! appended) past every trusted proxy to the first address that is not one, the rightmost
//! untrusted hop. Whatever a client writes into the header itself lies to the left of what the
//! proxies appended, so it is never reached unless every proxy after it is trusted. A hop that
//! is not an address (`unknown`, an obfuscated `_name`, garbage) stops the walk at the last
//! trusted hop, whose address is then the client's. With all hops trusted it is the leftmost.
//!
//! `X-Forwarded-For` is read when present (every common proxy writes it: nginx, Caddy,
//! Traefik, HAProxy's `option forwardfor`, Envoy), otherwise `Forwarded` (RFC 7239, its `for=`
//! parameters). Several lines of one header are one list, in order. A proxy that writes only
//! `Forwarded` must drop a client's `X-Forwarded-For`, or that client chooses its address.
//! From a peer that is not trusted both headers are ignored.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use warden_service::config::serve::{canonical_ip, IpRange};

/// The client address of a request from `peer` with `headers`, believing the forwarding
/// headers only of `trusted` peers (see the module documentation).
pub(crate) fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpRange]) -> IpAddr {
    let peer = canonical_ip(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|range| range.contains(ip));
    if trusted.is_empty() || !is_trusted(peer) {
        return peer;
    }
    let hops = forwarded_hops(headers);
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = hop else {
            return client;
        };
        client = canonical_ip(*ip);
        if !is_trusted(client) {
            return client;
        }
    }
    client
}

/// The hops of the forwarding header, left to right: `None` for one that is not an address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect()
    };
    let x_forwarded_for = values("x-forwarded-for");
    if !x_forwarded_for.is_empty() {
        return x_forwarded_for
            .iter()
            .flat_map(|line| line.split(','))
            .map(parse_node)
            .collect();
    }
    values("forwarded")
        .iter()
        .flat_map(|line| line.split(','))
        .map(|element| {
            // `for=` among `;`-separated pairs; an element without one names no address.
            element
                .split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| key.trim().eq_ignore_ascii_case("for"))
                .and_then(|(_, value)| parse_node(value))
        })
        .collect()
}

/// One hop: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`, quoted or not.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"').trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    text.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|inner| inner.parse::<IpAddr>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn client(peer: &str, headers: &[(&str, &str)], trusted: &[&str]) -> String {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let trusted: Vec<IpRange> = trusted.iter().map(|t| IpRange::parse(t).unwrap()).collect();
        client_address(ip(peer), &map, &trusted).to_string()
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_peers() {
        let spoofed = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client("192.0.2.50", &spoofed, &[]), "192.0.2.50");
        assert_eq!(
            client("192.0.2.50", &spoofed, &["10.0.0.0/8"]),
            "192.0.2.50"
        );
        assert_eq!(client("10.0.0.1", &spoofed, &["10.0.0.0/8"]), "203.0.113.7");
        // A v4 peer of a dual-stack listener.
        assert_eq!(
            client("::ffff:10.0.0.1", &spoofed, &["10.0.0.1"]),
            "203.0.113.7"
        );
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_hop() {
        let trusted = ["10.0.0.0/8", "fd00::/8"];
        // The client wrote 198.51.100.1 itself; the proxy appended who connected to it.
        let headers = [("x-forwarded-for", "198.51.100.1, 203.0.113.7")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "203.0.113.7");
        // Two proxies: the inner one's hop is skipped.
        let headers = [("x-forwarded-for", "198.51.100.1, 203.0.113.7, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "203.0.113.7");
        // Several lines are one list; ports and brackets are dropped.
        let headers = [
            ("x-forwarded-for", "198.51.100.1"),
            ("x-forwarded-for", "[2001:db8::7]:4711"),
        ];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "2001:db8::7");
        // Garbage stops the walk at the last trusted hop.
        let headers = [("x-forwarded-for", "203.0.113.7, nonsense, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "10.0.0.2");
        let headers = [("x-forwarded-for", "")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "10.0.0.1");
        // Every hop trusted: the leftmost.
        let headers = [("x-forwarded-for", "10.0.0.9, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "10.0.0.9");
        // No header from a trusted proxy: the proxy itself.
        assert_eq!(client("10.0.0.1", &[], &trusted), "10.0.0.1");
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let trusted = ["10.0.0.0/8"];
        let headers = [(
            "forwarded",
            "for=198.51.100.1;proto=https, for=\"[2001:db8:cafe::17]:4711\";by=10.0.0.1",
        )];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "2001:db8:cafe::17");
        let headers = [("forwarded", "for=203.0.113.7, For=10.0.0.3")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "203.0.113.7");
        let headers = [("forwarded", "for=203.0.113.7, for=unknown")];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "10.0.0.1");
        // X-Forwarded-For wins when both are there.
        let headers = [
            ("forwarded", "for=198.51.100.1"),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        assert_eq!(client("10.0.0.1", &headers, &trusted), "203.0.113.7");
    }
}
