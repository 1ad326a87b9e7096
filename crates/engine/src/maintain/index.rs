//! Candidate versions from a Cargo sparse index (`[maintain] index`, crates.io's
//! `https://index.crates.io` by default; a local fake in tests) and the policy that says which
//! of them a task may upgrade to.
//!
//! The sparse index has one file per package, one JSON line per published version, with
//! `yanked` and (for versions published since crates.io started recording it) `pubtime`, the
//! publication time the cooldown reads. The crates.io web API's `created_at` would need a
//! second host; a version without `pubtime` is ineligible while a cooldown is configured.

use std::time::Duration;

/// One version in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexVersion {
    pub version: semver::Version,
    pub yanked: bool,
    /// Publication time, ms since the epoch.
    pub published_ms: Option<u64>,
}

/// The index path of a package (`1/a`, `2/ab`, `3/a/abc`, `se/rd/serde`), lowercase.
pub fn index_path(name: &str) -> String {
    let name = name.to_ascii_lowercase();
    match name.len() {
        1 => format!("1/{name}"),
        2 => format!("2/{name}"),
        3 => format!("3/{}/{name}", &name[..1]),
        _ => format!("{}/{}/{name}", &name[..2], &name[2..4]),
    }
}

/// The versions of an index file; lines that do not parse are skipped.
pub fn parse_index(text: &str) -> Vec<IndexVersion> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|entry| {
            let version = semver::Version::parse(entry.get("vers")?.as_str()?).ok()?;
            Some(IndexVersion {
                version,
                yanked: entry
                    .get("yanked")
                    .and_then(|y| y.as_bool())
                    .unwrap_or(false),
                published_ms: entry
                    .get("pubtime")
                    .and_then(|t| t.as_str())
                    .and_then(warden_time::parse_rfc3339_since_epoch),
            })
        })
        .collect()
}

/// The largest index file read (crates.io's largest are a few MiB).
const MAX_INDEX_FILE_BYTES: usize = 16 * 1024 * 1024;

/// Fetches `name`'s versions from the sparse index at `index` (a URL without the trailing
/// slash). The `User-Agent` names Warden, as crates.io asks of clients.
pub async fn fetch_versions(
    client: &reqwest::Client,
    index: &str,
    name: &str,
) -> Result<Vec<IndexVersion>, String> {
    let url = format!("{}/{}", index.trim_end_matches('/'), index_path(name));
    let bytes = get_capped(client, &url, MAX_INDEX_FILE_BYTES, "the index")
        .await?
        .ok_or_else(|| format!("{name} is not in the index ({url}: 404)"))?;
    Ok(parse_index(&String::from_utf8_lossy(&bytes)))
}

/// GETs `url` naming Warden in the `User-Agent` (as crates.io asks of clients): the body, or
/// `None` for 404 or 410 (the Go module proxy protocol's "not found"). The body is read in
/// chunks and refused past `cap` bytes before it is held whole; `what` names the server in
/// errors.
pub async fn get_capped(
    client: &reqwest::Client,
    url: &str,
    cap: usize,
    what: &str,
) -> Result<Option<Vec<u8>>, String> {
    let mut response = client
        .get(url)
        .header(
            reqwest::header::USER_AGENT,
            format!(
                "warden/{} (maintenance; +https://github.com/warden)",
                env!("CARGO_PKG_VERSION")
            ),
        )
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| format!("cannot reach {what} at {url}: {}", chain(&e)))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("{what} answered {status} for {url}"));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {url}: {e}"))?
    {
        if bytes.len() + chunk.len() > cap {
            return Err(format!("{url}: larger than {} MiB", cap / (1024 * 1024)));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Some(bytes))
}

/// The system's CA bundles: what cargo itself trusts (through libcurl), so an index behind
/// the operator's own CA (a registry mirror) is read host-side as the sandbox's cargo reads it.
const SYSTEM_CA_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// The HTTP client the index is read with: the built-in web roots plus the system's CA bundle
/// when there is one.
pub fn client() -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder();
    for certificate in system_certificates()? {
        builder = builder.add_root_certificate(certificate);
    }
    builder.build().map_err(|e| format!("HTTP client: {e}"))
}

/// The certificates of the system's CA bundle, when there is one.
pub(super) fn system_certificates() -> Result<Vec<reqwest::Certificate>, String> {
    match SYSTEM_CA_BUNDLES
        .iter()
        .find_map(|path| std::fs::read(path).ok())
    {
        Some(pem) => reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("the system CA bundle does not parse: {e}")),
        None => Ok(Vec::new()),
    }
}

/// An error and its causes, `: `-separated.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Which versions a task may upgrade to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Major upgrades (semver-incompatible ones) are opt-in.
    pub allow_major: bool,
    /// Minimum age of a version, in days (0: none).
    pub cooldown_days: u32,
    /// Only these packages (empty: all).
    pub allow: Vec<String>,
    /// Never these packages.
    pub deny: Vec<String>,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

impl Policy {
    /// Whether the package may be upgraded at all; `Err` says why not.
    pub fn package(&self, name: &str) -> Result<(), String> {
        if self.deny.iter().any(|d| d == name) {
            return Err(format!("{name} is on [maintain] deny"));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|a| a == name) {
            return Err(format!("{name} is not on [maintain] allow"));
        }
        Ok(())
    }

    /// Whether `candidate` is eligible to replace `current` under the manifest's
    /// `requirements`; `Err` says why not (for the record of what was passed over).
    /// `direct`: the package is a direct dependency. `allow_major` applies to direct
    /// dependencies only: a transitive one's major is pinned by the packages that depend on
    /// it (their `^1` does not admit 2.0), so asking for it only fails the update.
    pub fn eligible(
        &self,
        versioning: Versioning,
        current: &semver::Version,
        requirements: &[semver::VersionReq],
        candidate: &IndexVersion,
        direct: bool,
    ) -> Result<(), String> {
        let v = &candidate.version;
        if v <= current {
            return Err(format!("{v} is not newer than {current}"));
        }
        if candidate.yanked {
            return Err(format!("{v} is yanked"));
        }
        if !v.pre.is_empty() {
            return Err(format!("{v} is a pre-release"));
        }
        if versioning == Versioning::GoModule && !versioning.compatible(current, v) {
            return Err(format!(
                "{v} is another major version: from v2 on a Go major is another module path, \
                 which maintain does not switch to"
            ));
        }
        if !self.allow_major && !versioning.compatible(current, v) {
            return Err(format!(
                "{v} is a major upgrade from {current} (set allow_major under [maintain])"
            ));
        }
        if !direct && !versioning.compatible(current, v) {
            return Err(format!(
                "{v} is a major upgrade from {current} of a transitive dependency, whose major \
                 the packages depending on it pin (allow_major applies to direct dependencies)"
            ));
        }
        if !self.allow_major {
            if let Some(req) = requirements.iter().find(|req| !req.matches(v)) {
                return Err(format!("{v} is outside the manifest's requirement {req}"));
            }
        }
        if self.cooldown_days > 0 {
            let cooldown_ms = u64::from(self.cooldown_days) * 86_400_000;
            match candidate.published_ms {
                None => {
                    return Err(format!(
                        "{v} has no publication time in the index, so its age is unknown \
                         (cooldown of {})",
                        days(self.cooldown_days)
                    ))
                }
                Some(at) if self.now_ms.saturating_sub(at) < cooldown_ms => {
                    return Err(format!(
                        "{v} is younger than the cooldown of {}",
                        days(self.cooldown_days)
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Which versions of an ecosystem are compatible with each other: Cargo's caret over semver
/// (Cargo and npm), or Go's modules, whose next major is another module path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    Caret,
    GoModule,
}

impl Versioning {
    /// Whether `candidate` may replace `current` without a major upgrade.
    pub fn compatible(self, current: &semver::Version, candidate: &semver::Version) -> bool {
        match self {
            Versioning::Caret => compatible(current, candidate),
            Versioning::GoModule => candidate.major == current.major && candidate.build.is_empty(),
        }
    }
}

/// Semver compatibility as Cargo's caret reads it: the same major version, or for `0.y`
/// the same minor, or for `0.0.z` the same patch.
pub fn compatible(current: &semver::Version, candidate: &semver::Version) -> bool {
    match (current.major, current.minor) {
        (0, 0) => candidate.major == 0 && candidate.minor == 0 && candidate.patch == current.patch,
        (0, minor) => candidate.major == 0 && candidate.minor == minor,
        (major, _) => candidate.major == major,
    }
}

/// `1 day`, `3 days`.
fn days(n: u32) -> String {
    match n {
        1 => "1 day".to_string(),
        n => format!("{n} days"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_day_cooldown_reads_in_the_singular() {
        let policy = Policy {
            cooldown_days: 1,
            now_ms: 10 * 86_400_000,
            ..Policy::default()
        };
        let candidate = |published_ms| IndexVersion {
            version: semver::Version::new(1, 0, 1),
            yanked: false,
            published_ms,
        };
        let current = semver::Version::new(1, 0, 0);
        let eco = Versioning::Caret;
        assert_eq!(
            policy.eligible(
                eco,
                &current,
                &[],
                &candidate(Some(10 * 86_400_000 - 1)),
                true
            ),
            Err("1.0.1 is younger than the cooldown of 1 day".to_string())
        );
        let unknown = policy
            .eligible(eco, &current, &[], &candidate(None), true)
            .unwrap_err();
        assert!(unknown.ends_with("(cooldown of 1 day)"), "{unknown}");
        assert_eq!(
            policy.eligible(eco, &current, &[], &candidate(Some(8 * 86_400_000)), true),
            Ok(())
        );
    }

    /// A local index whose file for any crate is `size` bytes of newlines, sent chunked.
    async fn serve_index_of(size: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'\n'; 1024 * 1024];
            let mut sent = 0;
            while sent < size {
                let part = &chunk[..chunk.len().min(size - sent)];
                let framed = [format!("{:x}\r\n", part.len()).as_bytes(), part, b"\r\n"].concat();
                if stream.write_all(&framed).await.is_err() {
                    return; // the reader stopped: what the test wants
                }
                sent += part.len();
            }
            let _ = stream.write_all(b"0\r\n\r\n").await;
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_index_file_past_the_bound_is_refused_before_it_is_read_whole() {
        let client = reqwest::Client::new();
        let index = serve_index_of(MAX_INDEX_FILE_BYTES + 3 * 1024 * 1024).await;
        let error = fetch_versions(&client, &index, "smallvec")
            .await
            .unwrap_err();
        assert!(error.contains("larger than 16 MiB"), "{error}");
        let index = serve_index_of(1024).await;
        assert!(fetch_versions(&client, &index, "smallvec")
            .await
            .unwrap()
            .is_empty());
    }

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    fn at(version: &str, pubtime: Option<&str>, yanked: bool) -> IndexVersion {
        IndexVersion {
            version: v(version),
            yanked,
            published_ms: pubtime.and_then(warden_time::parse_rfc3339_since_epoch),
        }
    }

    #[test]
    fn index_paths_follow_the_registry_layout() {
        assert_eq!(index_path("a"), "1/a");
        assert_eq!(index_path("ab"), "2/ab");
        assert_eq!(index_path("abc"), "3/a/abc");
        assert_eq!(index_path("SmallVec"), "sm/al/smallvec");
    }

    #[test]
    fn index_lines_give_versions_yanks_and_publication_times() {
        let text = "{\"name\":\"x\",\"vers\":\"1.6.0\",\"yanked\":false,\"pubtime\":\"2020-12-31T22:08:03Z\"}\n\
                    {\"name\":\"x\",\"vers\":\"1.13.0\",\"yanked\":true}\nnot json\n";
        let versions = parse_index(text);
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0].published_ms, Some(1_609_452_483_000));
        assert!(versions[1].yanked);
    }

    #[test]
    fn the_policy_keeps_compatible_settled_versions_the_manifest_allows() {
        let now = warden_time::parse_rfc3339_since_epoch("2026-01-01T00:00:00Z").unwrap();
        let policy = Policy {
            now_ms: now,
            ..Policy::default()
        };
        let current = v("1.6.0");
        let req = [semver::VersionReq::parse("1.6").unwrap()];
        let ok =
            |p: &Policy, c: &IndexVersion| p.eligible(Versioning::Caret, &current, &req, c, true);
        assert!(ok(&policy, &at("1.6.1", None, false)).is_ok());
        assert!(ok(&policy, &at("1.13.2", None, false)).is_ok());
        for (candidate, reason) in [
            (at("1.6.0", None, false), "not newer"),
            (at("1.13.0", None, true), "yanked"),
            (at("2.0.0-alpha.1", None, false), "pre-release"),
            (at("2.0.0", None, false), "major upgrade"),
        ] {
            let error = ok(&policy, &candidate).unwrap_err();
            assert!(error.contains(reason), "{reason}: {error}");
        }
        // Majors are opt-in.
        let majors = Policy {
            allow_major: true,
            ..policy.clone()
        };
        assert!(ok(&majors, &at("2.0.0", None, false)).is_ok());
        // ... for direct dependencies: a transitive one's major is its dependents' to pin, and
        // its compatible upgrades stay eligible.
        let transitive =
            |c: &IndexVersion| majors.eligible(Versioning::Caret, &current, &[], c, false);
        let error = transitive(&at("2.0.0", None, false)).unwrap_err();
        assert!(
            error.contains("of a transitive dependency") && error.contains("pin"),
            "{error}"
        );
        assert!(transitive(&at("1.13.2", None, false)).is_ok());
        // The manifest's requirement bounds a compatible upgrade.
        let pinned = [semver::VersionReq::parse("~1.6").unwrap()];
        let error = policy
            .eligible(
                Versioning::Caret,
                &current,
                &pinned,
                &at("1.13.2", None, false),
                true,
            )
            .unwrap_err();
        assert!(error.contains("requirement"), "{error}");
        // A cooldown needs a known, old enough publication time.
        let cooling = Policy {
            cooldown_days: 7,
            ..policy.clone()
        };
        assert!(ok(&cooling, &at("1.6.1", Some("2021-01-08T17:34:20Z"), false)).is_ok());
        assert!(
            ok(&cooling, &at("1.6.1", Some("2025-12-30T00:00:00Z"), false))
                .unwrap_err()
                .contains("younger")
        );
        assert!(ok(&cooling, &at("1.6.1", None, false))
            .unwrap_err()
            .contains("unknown"));
        // Allow and deny lists.
        let lists = Policy {
            allow: vec!["smallvec".into()],
            deny: vec!["itoa".into()],
            ..policy
        };
        assert!(lists.package("smallvec").is_ok());
        assert!(lists.package("itoa").unwrap_err().contains("deny"));
        assert!(lists.package("serde").unwrap_err().contains("allow"));
        assert!(compatible(&v("0.4.1"), &v("0.4.9")));
        assert!(!compatible(&v("0.4.1"), &v("0.5.0")));
        assert!(!compatible(&v("0.0.1"), &v("0.0.2")));
    }
}
