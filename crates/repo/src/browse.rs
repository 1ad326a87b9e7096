//! Browse links for evidence: recognises GitHub- and GitLab-style hosts from a repository URL
//! (https, ssh or scp-like, credentials stripped) and builds line-anchored links pinned to a full
//! commit. The links are built by Warden, never taken from the model.

/// How a repository's files are linked on the web.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrowseBase {
    /// `{base}/blob/{commit}/{path}#L{s}-L{e}`; `base` is e.g. `https://github.com/owner/repo`.
    GitHub { base: String },
    /// `{base}/-/blob/{commit}/{path}#L{s}-{e}`; `base` is e.g. `https://gitlab.com/group/project`.
    GitLab { base: String },
}

/// A link to lines `start..=end` of `path` at `commit` (a single line when `start == end`).
pub fn evidence_url(browse: &BrowseBase, commit: &str, path: &str, start: u64, end: u64) -> String {
    let path = percent_encode_path(path);
    match browse {
        BrowseBase::GitHub { base } if start == end => {
            format!("{base}/blob/{commit}/{path}#L{start}")
        }
        BrowseBase::GitHub { base } => format!("{base}/blob/{commit}/{path}#L{start}-L{end}"),
        BrowseBase::GitLab { base } if start == end => {
            format!("{base}/-/blob/{commit}/{path}#L{start}")
        }
        BrowseBase::GitLab { base } => format!("{base}/-/blob/{commit}/{path}#L{start}-{end}"),
    }
}

/// The browse base for a repository URL, or `None` when the host is not GitHub- or GitLab-like
/// or the URL is not one Warden can turn into a safe https link.
pub(crate) fn browse_base(url: &str) -> Option<BrowseBase> {
    let (scheme, authority, path) = match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            (scheme.to_ascii_lowercase(), authority, path)
        }
        // scp-like `[user@]host:path`
        None => {
            let (authority, path) = url.split_once(':')?;
            if authority.contains('/') {
                return None;
            }
            ("ssh".to_string(), authority, path)
        }
    };
    let web_scheme = match scheme.as_str() {
        "https" => "https",
        "http" => "http",
        "ssh" | "git+ssh" | "ssh+git" | "git" => "https",
        _ => return None,
    };
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    };
    let host = host.to_ascii_lowercase();
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        && !host.starts_with(['.', '-']);
    if !host_ok {
        return None;
    }
    // An ssh port says nothing about the web server's port.
    let port = match (web_scheme, scheme.as_str(), port) {
        (_, "https" | "http", Some(port)) if !port.is_empty() => {
            if !port.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            format!(":{port}")
        }
        _ => String::new(),
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').collect();
    let path_ok = segments.len() >= 2
        && segments.iter().all(|segment| {
            !segment.is_empty()
                && !matches!(*segment, "." | "..")
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~'))
        });
    if !path_ok {
        return None;
    }
    let base = format!("{web_scheme}://{host}{port}/{path}");
    if host.contains("github") {
        Some(BrowseBase::GitHub { base })
    } else if host.contains("gitlab") {
        Some(BrowseBase::GitLab { base })
    } else {
        None
    }
}

fn percent_encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gh(base: &str) -> Option<BrowseBase> {
        Some(BrowseBase::GitHub { base: base.into() })
    }

    fn gl(base: &str) -> Option<BrowseBase> {
        Some(BrowseBase::GitLab { base: base.into() })
    }

    #[test]
    fn recognises_hosts_and_strips_credentials() {
        for (url, expect) in [
            ("https://github.com/o/r", gh("https://github.com/o/r")),
            ("https://github.com/o/r.git", gh("https://github.com/o/r")),
            ("https://github.com/o/r/", gh("https://github.com/o/r")),
            (
                "https://tok:x-oauth@github.com/o/r.git",
                gh("https://github.com/o/r"),
            ),
            ("git@github.com:o/r.git", gh("https://github.com/o/r")),
            ("ssh://git@github.com/o/r.git", gh("https://github.com/o/r")),
            (
                "ssh://git@github.com:22/o/r.git",
                gh("https://github.com/o/r"),
            ),
            ("git+ssh://git@GitHub.com/o/r", gh("https://github.com/o/r")),
            (
                "https://github.example.com/o/r",
                gh("https://github.example.com/o/r"),
            ),
            (
                "https://gitlab.com/g/sub/p.git",
                gl("https://gitlab.com/g/sub/p"),
            ),
            (
                "git@gitlab.example.org:g/p.git",
                gl("https://gitlab.example.org/g/p"),
            ),
            (
                "https://gitlab.internal:8443/g/p",
                gl("https://gitlab.internal:8443/g/p"),
            ),
            ("http://gitlab.lan/g/p", gl("http://gitlab.lan/g/p")),
            (
                "https://github.com/o/r?x=1#frag",
                gh("https://github.com/o/r"),
            ),
            ("https://bitbucket.org/o/r", None),
            ("https://example.com/o/r", None),
            ("file:///srv/github/o/r", None),
            ("/srv/github/o/r", None),
            ("https://github.com/o", None),
            ("https://github.com/", None),
            ("https://github.com/o/r with space", None),
            ("https://github.com/o/../r", None),
            ("https://git<hub.com/o/r", None),
            ("https://github.com:x/o/r", None),
        ] {
            assert_eq!(browse_base(url), expect, "{url}");
        }
    }

    #[test]
    fn builds_line_anchored_links() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let github = BrowseBase::GitHub {
            base: "https://github.com/o/r".into(),
        };
        let gitlab = BrowseBase::GitLab {
            base: "https://gitlab.com/g/p".into(),
        };
        for (browse, path, start, end, expect) in [
            (
                &github,
                "src/lib.rs",
                10,
                24,
                format!("https://github.com/o/r/blob/{commit}/src/lib.rs#L10-L24"),
            ),
            (
                &github,
                "src/lib.rs",
                7,
                7,
                format!("https://github.com/o/r/blob/{commit}/src/lib.rs#L7"),
            ),
            (
                &gitlab,
                "src/lib.rs",
                10,
                24,
                format!("https://gitlab.com/g/p/-/blob/{commit}/src/lib.rs#L10-24"),
            ),
            (
                &gitlab,
                "a.md",
                3,
                3,
                format!("https://gitlab.com/g/p/-/blob/{commit}/a.md#L3"),
            ),
            (
                &github,
                "docs/a b#c?.md",
                1,
                2,
                format!("https://github.com/o/r/blob/{commit}/docs/a%20b%23c%3F.md#L1-L2"),
            ),
            (
                &github,
                "ünï.rs",
                1,
                1,
                format!("https://github.com/o/r/blob/{commit}/%C3%BCn%C3%AF.rs#L1"),
            ),
        ] {
            assert_eq!(evidence_url(browse, commit, path, start, end), expect);
        }
    }
}
