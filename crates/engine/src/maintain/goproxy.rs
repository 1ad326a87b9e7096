//! Candidate versions of Go modules from a module proxy (the `GOPROXY` protocol:
//! `<proxy>/<module>/@v/list` and `<proxy>/<module>/@v/<version>.info`), read by Warden on the
//! host over HTTP(S) or, for a `file://` proxy, from the directory.
//!
//! Module paths come from the repository's `go.mod` and are hostile: a path is checked against
//! Go's module path rules before it is put in a URL or joined to a directory, so `../` cannot
//! leave a `file://` proxy.

use super::index::{get_capped, IndexVersion};

/// The largest `list` or `.info` read.
const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

/// The most versions whose `.info` is read for one module (the newest ones).
const MAX_INFOS: usize = 64;

/// Go's module path rules, kept with `--select`'s ([`crate::maintain_options`]).
pub use crate::maintain_options::check_go_module_path as check_module_path;

/// Whether `version` is one a proxy may serve (`v1.2.3`, `v1.2.3-pre`, `+incompatible`).
fn check_version(version: &str) -> bool {
    version.starts_with('v')
        && version.len() < 128
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '+'))
}

/// The proxy protocol's case encoding: each capital letter becomes `!` and its lower case.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_uppercase() {
            out.push('!');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A module proxy: an HTTP(S) base URL or a local directory (parsed with `[maintain]`).
pub use crate::maintain_config::GoProxy as Proxy;

impl Proxy {
    /// `<module>/@v/<name>` of this proxy: the body, or `None` when the proxy has no such file.
    async fn get(
        &self,
        client: &reqwest::Client,
        module: &str,
        name: &str,
    ) -> Result<Option<Vec<u8>>, String> {
        let relative = format!("{}/@v/{name}", escape(module));
        match self {
            Proxy::Http(base) => {
                get_capped(
                    client,
                    &format!("{base}/{relative}"),
                    MAX_FILE_BYTES,
                    "the Go module proxy",
                )
                .await
            }
            Proxy::Dir(dir) => {
                let path = dir.join(&relative);
                match std::fs::metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(format!("cannot read {}: {e}", path.display())),
                    Ok(meta) if meta.len() > MAX_FILE_BYTES as u64 => Err(format!(
                        "{}: larger than {} MiB",
                        path.display(),
                        MAX_FILE_BYTES / (1024 * 1024)
                    )),
                    Ok(_) => std::fs::read(&path)
                        .map(Some)
                        .map_err(|e| format!("cannot read {}: {e}", path.display())),
                }
            }
        }
    }
}

/// The released versions of `module` the proxy lists that are newer than `current`, each with
/// its publication time from its `.info` (the newest `MAX_INFOS`; an older one has none).
/// Versions that are not semver (`vX.Y.Z…`) are left out. A module the proxy does not know is
/// an error naming it.
pub async fn fetch_versions(
    client: &reqwest::Client,
    proxy: &Proxy,
    module: &str,
    current: &semver::Version,
) -> Result<Vec<IndexVersion>, String> {
    check_module_path(module)?;
    let list = proxy
        .get(client, module, "list")
        .await?
        .ok_or_else(|| format!("{module} is not on the Go module proxy"))?;
    let mut versions: Vec<(String, semver::Version)> = String::from_utf8_lossy(&list)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|v| check_version(v))
        .filter_map(|v| Some((v.to_string(), super::gomod::semver_of(v)?)))
        .filter(|(_, semver)| semver > current)
        .collect();
    versions.sort_by(|a, b| b.1.cmp(&a.1));
    versions.dedup_by(|a, b| a.1 == b.1);
    let mut out = Vec::new();
    for (i, (text, version)) in versions.into_iter().enumerate() {
        let published_ms = if i < MAX_INFOS {
            let info = proxy
                .get(client, module, &format!("{}.info", escape(&text)))
                .await?;
            info.and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
                .and_then(|info| {
                    info.get("Time")
                        .and_then(|t| t.as_str())
                        .and_then(warden_time::parse_rfc3339_since_epoch)
                })
        } else {
            None
        };
        out.push(IndexVersion {
            version,
            yanked: false,
            published_ms,
        });
    }
    Ok(out)
}

/// `1.2.3` → `v1.2.3`: a version as `go.mod` and the `go` command write it.
pub fn go_version(version: &semver::Version) -> String {
    format!("v{version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_that_could_leave_the_proxy_are_refused() {
        for good in [
            "example.com/greet",
            "github.com/Azure/go-sdk",
            "gopkg.in/yaml.v3",
        ] {
            check_module_path(good).unwrap();
        }
        for bad in [
            "",
            "../etc",
            "example.com/../../etc",
            "example.com//x",
            "/abs",
            "example.com/.hidden",
            "example.com/x y",
            "example.com/x%2f",
            "example.com/x\\y",
            "-modfile=x",
        ] {
            assert!(check_module_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            escape("github.com/Azure/go-SDK"),
            "github.com/!azure/go-!s!d!k"
        );
        assert!(Proxy::parse("direct").is_err());
        assert!(Proxy::parse("file://relative").is_err());
        assert_eq!(
            Proxy::parse("https://proxy.golang.org/").unwrap(),
            Proxy::Http("https://proxy.golang.org".into())
        );
    }

    #[tokio::test]
    async fn a_file_proxy_lists_newer_versions_with_their_times() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("example.com/!greet/@v");
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(
            at.join("list"),
            "v1.0.0\nv1.1.0\nv1.0.1\nnot-a-version\nv2.0.0+incompatible\n",
        )
        .unwrap();
        std::fs::write(
            at.join("v1.0.1.info"),
            r#"{"Version":"v1.0.1","Time":"2025-01-02T00:00:00Z"}"#,
        )
        .unwrap();
        let proxy = Proxy::parse(&format!("file://{}", dir.path().display())).unwrap();
        let client = reqwest::Client::new();
        let current = semver::Version::new(1, 0, 0);
        let versions = fetch_versions(&client, &proxy, "example.com/Greet", &current)
            .await
            .unwrap();
        let listed: Vec<String> = versions.iter().map(|v| v.version.to_string()).collect();
        assert_eq!(listed, ["2.0.0+incompatible", "1.1.0", "1.0.1"]);
        assert_eq!(
            versions[2].published_ms,
            warden_time::parse_rfc3339_since_epoch("2025-01-02T00:00:00Z")
        );
        assert_eq!(versions[1].published_ms, None, "no .info: no time");
        let missing = fetch_versions(&client, &proxy, "example.com/other", &current)
            .await
            .unwrap_err();
        assert!(missing.contains("not on the Go module proxy"), "{missing}");
        let escaping = fetch_versions(&client, &proxy, "../../etc", &current)
            .await
            .unwrap_err();
        assert!(
            escaping.contains("not a valid Go module path"),
            "{escaping}"
        );
    }
}
