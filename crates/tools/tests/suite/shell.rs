//! The `shell` tool refuses nothing by name: `curl`, `c''url`, `$(printf cu)rl` and `m''ount` all
//! reach the sandbox, and its OS layers are what hold — no connection leaves it, whatever the
//! program is called, and nothing is mounted. Runs on every isolating backend this machine has
//! (`WARDEN_SANDBOX_TEST_REQUIRE=linux,gvisor` makes a missing one fail instead of skip).

use super::{block_on, error};
use serde_json::json;
use std::net::TcpListener;
use std::sync::Arc;
use warden_runtime::Tool;
use warden_sandbox::{select, Backend, ResourceLimits, SandboxConfig, SandboxView, ViewSpec};
use warden_tools::shell::Shell;

/// A read-only view of a one-file snapshot on `backend`, or `None` (with the reason printed) on
/// a machine without it, unless the test environment requires it.
fn view(backend: Backend, dir: &std::path::Path) -> Option<Box<dyn SandboxView>> {
    let sandbox = match select(backend, &SandboxConfig::default()) {
        Ok(sandbox) => sandbox,
        Err(error) => {
            let required = std::env::var("WARDEN_SANDBOX_TEST_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|name| name.trim() == backend.as_str());
            assert!(!required, "{backend} is required here but: {error}");
            eprintln!("SKIP {backend}: {error}");
            return None;
        }
    };
    let snapshot = dir.join("snapshot");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(snapshot.join("README.md"), "# app\n").unwrap();
    Some(
        sandbox
            .open(&ViewSpec {
                lower: vec![("app".into(), snapshot)],
                writable: false,
                scratch_dir: dir.join("scratch"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })
            .unwrap(),
    )
}

fn network_tools_run_and_fail_at_the_os_layers(backend: Backend) {
    if !std::path::Path::new("/usr/bin/curl").exists() {
        eprintln!("SKIP: no /usr/bin/curl on this machine for the sandbox to show");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(view) = view(backend, dir.path()) else {
        return;
    };
    let shell = Shell::new(Arc::new(view), ResourceLimits::default());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for command in [
        "curl -sS -m 10 http://example.com/".to_string(),
        "$(printf cu)rl -sS -m 10 http://example.com/".to_string(),
        format!("curl -sS -m 10 http://127.0.0.1:{port}/"),
        format!("c''url -sS -m 10 http://127.0.0.1:{port}/"),
        format!("$(printf cu)rl -sS -m 10 http://127.0.0.1:{port}/"),
        // An address, so no name resolution stands in front of the socket.
        "curl -sS -m 10 http://93.184.215.14/".to_string(),
    ] {
        let output = error(block_on(shell.call(json!({ "command": command }))));
        assert!(!output.contains("command refused"), "{command}: {output}");
        // curl ran in the sandbox and could not resolve (6) or connect (7).
        assert!(
            output.starts_with("exit code 6\n") || output.starts_with("exit code 7\n"),
            "{command} on {backend}: {output}"
        );
        assert!(output.contains("curl: ("), "{command}: {output}");
        eprintln!("{backend}: {command}: {}", output.replace('\n', " | "));
    }
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection from the {backend} sandbox"
    );
    // `mount` runs too, and the sandbox refuses the mount itself.
    let output = error(block_on(shell.call(json!({
        "command": "m''ount -t tmpfs none /tmp && echo MOUNTED"
    }))));
    assert!(!output.contains("command refused"), "{output}");
    assert!(
        output.contains("mount") && !output.contains("MOUNTED"),
        "{output}"
    );
}

#[test]
fn network_tools_run_and_fail_at_the_os_layers_on_linux() {
    network_tools_run_and_fail_at_the_os_layers(Backend::Linux);
}

#[test]
fn network_tools_run_and_fail_at_the_os_layers_on_gvisor() {
    network_tools_run_and_fail_at_the_os_layers(Backend::Gvisor);
}
