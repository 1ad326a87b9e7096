//! Recognising a check that failed because a package manager could not fetch what the project
//! depends on: checks run without network, so a dependency the cache does not hold fails the
//! same way on every tree, whatever the agent writes. [`offline_failure`] reads a failing
//! check's output for the messages Cargo, npm and Go print then, and names the package manager
//! (`cargo`, `npm`, `go`), for which the caller knows the setting that fixes it.

/// The package manager whose offline-resolution failure `output` shows, if any.
pub fn offline_failure(output: &str) -> Option<&'static str> {
    let has = |needle: &str| output.contains(needle);
    // Cargo with `CARGO_NET_OFFLINE` (the rust preset) or `--offline`.
    if has("but --offline was specified")
        || has("you're using offline mode (--offline)")
        || (has("no matching package named") && has("offline"))
    // Cargo without the offline switch: the registry's host does not resolve.
        || ((has("failed to download from `https://") || has("failed to get `"))
            && (has("Couldn't resolve host name") || has("Couldn't connect to server"))
            && has("crates.io"))
    {
        return Some("cargo");
    }
    // npm with `npm_config_offline` (the node preset), or without network at all.
    if has("code ENOTCACHED")
        || has("cache mode is 'only-if-cached' but no cached response is available")
        || ((has("npm ERR!") || has("npm error"))
            && has("request to http")
            && (has("getaddrinfo") || has("ENOTFOUND") || has("EAI_AGAIN")))
    {
        return Some("npm");
    }
    // Go with `GOPROXY=off` (the go preset), or a proxy it cannot reach.
    if has("module lookup disabled by GOPROXY=off")
        || (has("Get \"https://proxy.golang.org/") && has("dial tcp"))
    {
        return Some("go");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::offline_failure;

    #[test]
    fn cargos_offline_failures_are_recognised() {
        // A dependency the cache lacks, resolving with CARGO_NET_OFFLINE (no lockfile).
        let resolve = "    Updating crates.io index
error: no matching package named `semver` found
location searched: registry `crates-io`
required by package `demo v0.1.0 (/repo)`
As a reminder, you're using offline mode (--offline) which can sometimes cause surprising \
resolution failures, if this error is too confusing you may wish to retry without the offline \
flag.";
        assert_eq!(offline_failure(resolve), Some("cargo"));
        // A locked crate not downloaded.
        let download = "error: failed to download `semver v1.0.23`

Caused by:
  attempting to make an HTTP request, but --offline was specified";
        assert_eq!(offline_failure(download), Some("cargo"));
        // No offline switch, no network.
        let network =
            "error: failed to get `semver` as a dependency of package `demo v0.1.0 (/repo)`

Caused by:
  download of config.json failed

Caused by:
  failed to download from `https://index.crates.io/config.json`

Caused by:
  [6] Couldn't resolve host name (Could not resolve host: index.crates.io)";
        assert_eq!(offline_failure(network), Some("cargo"));
    }

    #[test]
    fn npms_and_gos_offline_failures_are_recognised() {
        let npm_offline = "npm ERR! code ENOTCACHED
npm ERR! request to https://registry.npmjs.org/left-pad failed: cache mode is 'only-if-cached' \
but no cached response is available.

npm ERR! A complete log of this run can be found in: /root/.npm/_logs/debug-0.log";
        assert_eq!(offline_failure(npm_offline), Some("npm"));
        let npm_network = "npm error code EAI_AGAIN
npm error syscall getaddrinfo
npm error errno EAI_AGAIN
npm error request to https://registry.npmjs.org/left-pad failed, reason: getaddrinfo EAI_AGAIN \
registry.npmjs.org";
        assert_eq!(offline_failure(npm_network), Some("npm"));
        let go_off = "main.go:3:8: github.com/pkg/errors@v0.9.1: module lookup disabled by \
GOPROXY=off";
        assert_eq!(offline_failure(go_off), Some("go"));
        let go_network = "go: github.com/pkg/errors@v0.9.1: Get \
\"https://proxy.golang.org/github.com/pkg/errors/@v/v0.9.1.mod\": dial tcp: lookup \
proxy.golang.org on 127.0.0.53:53: server misbehaving";
        assert_eq!(offline_failure(go_network), Some("go"));
    }

    #[test]
    fn failures_of_the_change_itself_are_not_offline() {
        // A test that fails, a compile error, a misspelt dependency resolved online.
        for output in [
            "test tests::it_works ... FAILED\n\nfailures:\n    tests::it_works\n\ntest result: \
             FAILED. 0 passed; 1 failed",
            "error[E0425]: cannot find value `x` in this scope\n --> src/lib.rs:2:5",
            "error: no matching package named `semverr` found\nlocation searched: registry \
             `crates-io`\nrequired by package `demo v0.1.0 (/repo)`",
            "npm ERR! Missing script: \"test\"",
            "--- FAIL: TestAdd (0.00s)\n    add_test.go:9: got 3, want 4\nFAIL",
            "",
        ] {
            assert_eq!(offline_failure(output), None, "{output}");
        }
    }
}
