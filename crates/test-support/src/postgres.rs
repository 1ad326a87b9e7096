//! The test Postgres: `WARDEN_TEST_POSTGRES_URL` names it (`.ci/postgres.sh` starts one and
//! prints the line). Without it the Postgres halves of the suites skip, saying so — unless
//! `WARDEN_TEST_REQUIRE` lists `postgres` (CI sets it), where a missing database fails the
//! test instead of letting it pass without having run.

/// The variable naming the test database.
pub const URL_VAR: &str = "WARDEN_TEST_POSTGRES_URL";
/// A comma-separated list of things the tests must not skip (`postgres`).
pub const REQUIRE_VAR: &str = "WARDEN_TEST_REQUIRE";

/// Whether `WARDEN_TEST_REQUIRE` lists `what`.
pub fn required(what: &str) -> bool {
    std::env::var(REQUIRE_VAR)
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == what)
}

/// The test database's URL; `None` (said on stderr) when none is configured and Postgres is not
/// required.
///
/// # Panics
/// When Postgres is required (`WARDEN_TEST_REQUIRE=postgres`) and no URL is set.
pub fn url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                !required("postgres"),
                "{REQUIRE_VAR} lists postgres but {URL_VAR} is not set: start one with \
                 `eval \"$(bash .ci/postgres.sh)\"`"
            );
            // Not `eprintln!`: the test harness would capture it.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: {URL_VAR} not set");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_required_database_that_is_missing_fails_instead_of_skipping() {
        // Re-run this test binary with the variables set, so the process environment of the
        // other tests is not changed underneath them.
        let exe = std::env::current_exe().unwrap();
        let run = |require: &str| {
            #[allow(clippy::disallowed_methods)]
            std::process::Command::new(&exe)
                .args(["--exact", "postgres::tests::probe", "--nocapture"])
                .env_remove(URL_VAR)
                .env(REQUIRE_VAR, require)
                .env("WARDEN_TEST_PROBE", "1")
                .output()
                .unwrap()
        };
        let required = run("linux,postgres");
        assert!(
            !required.status.success(),
            "a missing required database must fail"
        );
        assert!(String::from_utf8_lossy(&required.stderr).contains("lists postgres"));
        let optional = run("linux");
        assert!(optional.status.success(), "{optional:?}");
        assert!(String::from_utf8_lossy(&optional.stderr).contains("skipped"));
    }

    #[test]
    fn probe() {
        if std::env::var("WARDEN_TEST_PROBE").is_ok() {
            assert_eq!(url(), None);
        }
    }
}
