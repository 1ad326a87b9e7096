//! The file-tools probe: whether a backend's commands can list and measure the working root with
//! the everyday tools an agent reaches for first (`ls -la`, `stat`, `find`, `du`). A backend can
//! hold every isolation layer and still fail here (gVisor releases before
//! [`crate::MIN_RUNSC_RELEASE`] refuse the `statx` flag GNU `ls -l` and `stat` pass), so
//! [`crate::probe_tools`] runs it on every backend this machine has, for `warden doctor`; the
//! conformance suite runs the same commands.

use crate::{select, Backend, CommandSpec, SandboxConfig, SandboxError, ViewSpec};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The probed commands, each run in the working root of a read-only view.
pub const TOOLS_PROBE: [&str; 4] = ["ls -la .", "stat .", "find .", "du -s ."];

/// One line of [`crate::probe_tools`]: whether a backend's commands can use the everyday file
/// tools ([`TOOLS_PROBE`]) on the working root, and what fails otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsReport {
    /// The backend probed.
    pub backend: Backend,
    /// Whether every command of [`TOOLS_PROBE`] succeeded.
    pub works: bool,
    /// What worked, or which commands failed, how, and what to do about it.
    pub detail: String,
}

/// Runs [`TOOLS_PROBE`] on every backend (one command per backend that can be established).
pub(crate) fn probe(config: &SandboxConfig) -> Vec<ToolsReport> {
    [Backend::Linux, Backend::Gvisor, Backend::Local]
        .into_iter()
        .map(|backend| {
            let (works, detail) = match select(backend, config) {
                Err(error) => (
                    false,
                    format!("not run: the backend is unavailable here ({error})"),
                ),
                Ok(sandbox) => match run(sandbox.as_ref()) {
                    Err(error) => (false, format!("the probe could not run: {error}")),
                    Ok(failures) if failures.is_empty() => (
                        true,
                        format!("{} work on the working root", TOOLS_PROBE.join(", ")),
                    ),
                    Ok(failures) => {
                        let mut detail = failures.join("; ");
                        if backend == Backend::Gvisor {
                            detail.push_str(&match crate::gvisor::runsc_statx_defect(config) {
                                Some(defect) => format!(" ({defect})"),
                                None => format!(
                                    " (gVisor needs runsc {} or newer)",
                                    crate::MIN_RUNSC_RELEASE
                                ),
                            });
                        }
                        (false, detail)
                    }
                },
            };
            ToolsReport {
                backend,
                works,
                detail,
            }
        })
        .collect()
}

/// The probe script: each command of [`TOOLS_PROBE`], and for each one that fails a line
/// `` `command`: first line of its error ``.
fn script() -> String {
    let tools: Vec<String> = TOOLS_PROBE.iter().map(|tool| format!("'{tool}'")).collect();
    format!(
        "for tool in {}; do if ! error=$($tool 2>&1 >/dev/null); then \
         printf '`%s`: %s\\n' \"$tool\" \"$(printf '%s\\n' \"$error\" | head -n 1)\"; fi; done",
        tools.join(" ")
    )
}

/// Runs the probe in a read-only view of a small throwaway snapshot; returns the failures.
fn run(sandbox: &dyn crate::Sandbox) -> Result<Vec<String>, SandboxError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir().join(format!(
        "warden-tools-probe-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    // Left by a dead process whose pid this one reuses.
    let _ = crate::remove_scratch(&base);
    let result = (|| {
        let snapshot = base.join("snapshot");
        write_snapshot(&snapshot)
            .map_err(|e| SandboxError::io(format!("cannot create {}", snapshot.display()), e))?;
        let view = sandbox.open(&ViewSpec {
            lower: vec![("probe".into(), snapshot)],
            writable: false,
            scratch_dir: base.join("scratch"),
            mounts: Vec::new(),
            egress_proxy: None,
            seed: None,
        })?;
        let output = view.run(&CommandSpec::bash(&script(), Duration::from_secs(60)));
        view.close()?;
        let output = output?;
        let failures: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(str::to_owned)
            .collect();
        if failures.is_empty() && !output.success() {
            return Ok(vec![format!(
                "the probe failed (exit {:?}): {}",
                output.exit_code,
                String::from_utf8_lossy(&output.stderr).trim()
            )]);
        }
        Ok(failures)
    })();
    let _ = crate::remove_scratch(&base);
    result
}

fn write_snapshot(snapshot: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(snapshot.join("src"))?;
    std::fs::write(snapshot.join("README.md"), "# probe\n")?;
    std::fs::write(snapshot.join("src/lib.rs"), "pub fn probe() {}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_each_failing_tool_with_its_first_error_line() {
        let script = script();
        for tool in TOOLS_PROBE {
            assert!(script.contains(&format!("'{tool}'")), "{script}");
        }
        // A test of the script itself, on the host.
        #[allow(clippy::disallowed_methods)]
        let output = std::process::Command::new("bash")
            .args(["-c", &script.replace("'stat .'", "'stat /no/such/path'")])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        assert!(
            stdout.starts_with("`stat /no/such/path`: stat: cannot"),
            "{stdout}"
        );
    }
}
