//! `host[:port]` authorities: parsing a `Host` header, an `Origin` without its scheme, or a
//! `[serve] public_names` entry. Pure text handling shared by the service configuration (which
//! normalizes public names) and the API's Host and Origin pinning.

/// A host and its port, lowercase, without a trailing dot; IPv6 literals in brackets as Rust
/// prints them.
#[derive(Debug, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

/// Parses `host[:port]` (a `Host` header, an `Origin` without its scheme, a public name).
pub fn parse_authority(text: &str) -> Option<Authority> {
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: std::net::Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            port => Some(port.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse::<u16>().ok()?)),
            None => (text, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.len() <= 253
            && host
                .split('.')
                .all(|label| !label.is_empty() && label.len() <= 63)
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !valid {
            return None;
        }
        (host, port)
    };
    Some(Authority { host, port })
}

/// A `[serve] public_names` entry, normalized (`Name.Example.` → `name.example`), or `None`
/// when it is not `host` or `host:port`.
pub fn normalize_public_name(name: &str) -> Option<String> {
    let authority = parse_authority(name)?;
    Some(match authority.port {
        Some(port) => format!("{}:{port}", authority.host),
        None => authority.host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_names_are_normalized() {
        assert_eq!(
            normalize_public_name("Warden.Example.com.").as_deref(),
            Some("warden.example.com")
        );
        assert_eq!(
            normalize_public_name("[::1]:80").as_deref(),
            Some("[::1]:80")
        );
        for bad in ["https://x", "x/y", "", "x:", "x:http", "user@x"] {
            assert_eq!(normalize_public_name(bad), None, "{bad}");
        }
    }
}
