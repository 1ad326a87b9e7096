//! The conformance suite every isolating backend runs (and `local` the parts that make sense
//! without isolation). Each check is a function over a backend; `mod.rs` instantiates them as
//! `#[test]`s per backend.

use super::support::{bash, expect_success, run, text, Fixture, CANARY_KEY};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_sandbox::{
    CommandSpec, ResourceLimits, Sandbox, SandboxView, Stream, ViewSpec, WORKING_ROOT,
};

type Backend = Arc<dyn Sandbox>;

/// Opens a view; a layer this machine lacks for this kind of view (probe agrees) skips the
/// check with the reason printed.
fn try_open(sandbox: &Backend, view: &ViewSpec) -> Option<Box<dyn SandboxView>> {
    match sandbox.open(view) {
        Ok(view) => Some(view),
        Err(error) => {
            let layer = error
                .layer()
                .unwrap_or_else(|| panic!("open {view:?}: {error}"));
            let backend = sandbox.backend();
            let report = warden_sandbox::probe_with(&super::support::config())
                .into_iter()
                .find(|r| r.backend == backend && r.layer == layer)
                .unwrap_or_else(|| panic!("open failed ({error}) and probe has no {layer} report"));
            assert!(
                !report.available,
                "open failed ({error}) but probe reports {report:?}"
            );
            // A layer this machine lacks may skip a case, but not on a backend CI requires.
            assert!(
                !super::support::required(backend),
                "{backend} is required here ({}) but: {error}",
                super::support::REQUIRE_VAR
            );
            eprintln!("SKIP on {backend}: {error}");
            None
        }
    }
}

macro_rules! open {
    ($sandbox:expr, $view:expr $(,)?) => {
        match try_open($sandbox, &$view) {
            Some(view) => view,
            None => return,
        }
    };
}

/// Writing the snapshot fails, through any path, and the snapshot is unchanged.
pub fn writing_the_snapshot_fails(sandbox: &Backend) {
    let fixture = Fixture::new();
    let before = fixture.snapshot_state();
    let view = open!(sandbox, fixture.view(false));
    for script in [
        "echo x > README.md",
        "echo x >> README.md",
        "touch new-file",
        "rm -f README.md",
        "mkdir new-dir",
        "chmod 777 README.md",
        "mv README.md moved.md",
        "truncate -s 0 src/lib.rs",
        "ln -s /etc/passwd link",
    ] {
        let output = bash(view.as_ref(), script);
        assert!(!output.success(), "{script} succeeded in a read-only view");
    }
    view.close().unwrap();
    assert_eq!(fixture.snapshot_state(), before, "the snapshot changed");
}

/// Writable views: writes outside the working root and /tmp fail.
pub fn writing_outside_the_writable_layer_fails(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(true));
    for target in [
        "/etc/passwd",
        "/etc/new",
        "/usr/new",
        "/usr/bin/new",
        "/new",
        "/dev/new",
        "/proc/sys/kernel/hostname",
        "/root/new",
        "/home/new",
    ] {
        if target == "/dev/new" && sandbox.backend() == warden_sandbox::Backend::Gvisor {
            // gVisor's /dev is an in-sandbox tmpfs, gone with the command, never the host's.
            continue;
        }
        let output = bash(view.as_ref(), &format!("echo x > {target}"));
        assert!(
            !output.success(),
            "writing {target} succeeded: {}",
            text(&output.stderr)
        );
    }
    expect_success(&bash(
        view.as_ref(),
        "echo ok > /tmp/ok && cat /tmp/ok && echo ok > ./in-root && echo ok > /dev/null \
         && head -c 4 /dev/urandom > /dev/null && head -c 4 /dev/zero | wc -c",
    ));
    view.close().unwrap();
}

/// Writable views: changes (also to read-only-mode snapshot files, in read-only-mode snapshot
/// directories) are visible in the view and through `root()`, and the snapshot is unchanged.
pub fn writable_view_changes_land_in_the_view_only(sandbox: &Backend) {
    let fixture = Fixture::new();
    let before = fixture.snapshot_state();
    let view = open!(sandbox, fixture.view(true));
    let script = "set -e
        echo changed >> README.md
        sed -i 's/42/43/' src/lib.rs
        echo new > src/new.rs
        mkdir -p docs/deep && echo doc > docs/deep/a.md
        rm run.sh
        cat README.md src/lib.rs";
    let stdout = expect_success(&bash(view.as_ref(), script));
    assert!(
        stdout.contains("changed") && stdout.contains("43"),
        "{stdout}"
    );
    let root = view.root().to_path_buf();
    assert_eq!(
        std::fs::read_to_string(root.join("src/new.rs")).unwrap(),
        "new\n"
    );
    assert!(std::fs::read_to_string(root.join("README.md"))
        .unwrap()
        .ends_with("changed\n"));
    assert!(!root.join("run.sh").exists());
    // A second command sees the first one's changes.
    expect_success(&bash(
        view.as_ref(),
        "test -f src/new.rs && test ! -e run.sh && grep -q 43 src/lib.rs",
    ));
    view.close().unwrap();
    assert_eq!(fixture.snapshot_state(), before, "the snapshot changed");
}

/// A seed (`ViewSpec::seed`, warm build outputs) shows below the snapshot in a writable view:
/// its files appear where the snapshot has none, the snapshot's win where both have one, a
/// command's writes to seeded files stay in the view, and the seed is never written. Refused
/// for read-only and multi-repository views.
pub fn a_seed_shows_below_the_snapshot_and_is_never_written(sandbox: &Backend) {
    let fixture = Fixture::new();
    let seed = fixture.dir.path().join("seed");
    std::fs::create_dir_all(seed.join("target/debug")).unwrap();
    std::fs::write(seed.join("target/debug/built"), "from the base\n").unwrap();
    // The snapshot has src/lib.rs: the seed's copy must not show.
    std::fs::create_dir_all(seed.join("src")).unwrap();
    std::fs::write(seed.join("src/lib.rs"), "seed's\n").unwrap();
    let spec = ViewSpec {
        seed: Some(seed.clone()),
        ..fixture.view(true)
    };
    let view = open!(sandbox, spec);
    let stdout = expect_success(&bash(
        view.as_ref(),
        "cat target/debug/built && grep -c seed src/lib.rs;          echo rebuilt > target/debug/built && echo new > target/debug/other &&          rm -f target/debug/built2 && cat target/debug/built target/debug/other",
    ));
    assert!(stdout.starts_with("from the base\n0\n"), "{stdout}");
    assert!(stdout.ends_with("rebuilt\nnew\n"), "{stdout}");
    view.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(seed.join("target/debug/built")).unwrap(),
        "from the base\n"
    );
    assert!(!seed.join("target/debug/other").exists());

    // A second view sees the seed as it was.
    let again = ViewSpec {
        seed: Some(seed.clone()),
        scratch_dir: fixture.scratch("seeded-again"),
        ..fixture.view(true)
    };
    let view = open!(sandbox, again);
    let stdout = expect_success(&bash(
        view.as_ref(),
        "cat target/debug/built; test ! -e target/debug/other && echo absent",
    ));
    assert_eq!(stdout, "from the base\nabsent\n");
    view.close().unwrap();

    for (what, spec) in [
        (
            "read-only",
            ViewSpec {
                seed: Some(seed.clone()),
                scratch_dir: fixture.scratch("seeded-ro"),
                ..fixture.view(false)
            },
        ),
        (
            "relative",
            ViewSpec {
                seed: Some("seed".into()),
                scratch_dir: fixture.scratch("seeded-relative"),
                ..fixture.view(true)
            },
        ),
    ] {
        match sandbox.open(&spec) {
            Err(warden_sandbox::SandboxError::InvalidRequest(message)) => {
                assert!(message.contains("seed"), "{what}: {message}")
            }
            Err(other) => panic!("{what}: {other}"),
            Ok(_) => panic!("{what}: a seed was accepted"),
        }
    }
}

/// Several repositories: one folder per name under the working root.
pub fn multi_repository_views(sandbox: &Backend) {
    let fixture = Fixture::new();
    let other = fixture.dir.path().join("other");
    super::support::snapshot_at(&other, &[("lib.py", "x = 1\n")]);
    for writable in [false, true] {
        let view = open!(
            sandbox,
            ViewSpec {
                lower: vec![
                    ("app".into(), fixture.snapshot.clone()),
                    ("lib".into(), other.clone()),
                ],
                writable,
                scratch_dir: fixture.scratch(if writable { "multi-rw" } else { "multi-ro" }),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            },
        );
        let stdout = expect_success(&bash(view.as_ref(), "ls; cat app/src/lib.rs lib/lib.py"));
        assert!(
            stdout.contains("app\nlib\n") && stdout.contains("x = 1"),
            "{stdout}"
        );
        let write = bash(view.as_ref(), "echo y >> lib/lib.py && cat lib/lib.py");
        assert_eq!(write.success(), writable, "{}", text(&write.stderr));
        // The folder holding the repositories is not part of any writable layer — except in a
        // pod, whose working root is an emptyDir the sandbox user owns (what is made there
        // stays in the pod).
        if sandbox.backend().isolates() && sandbox.backend() != warden_sandbox::Backend::Kubernetes
        {
            assert!(!bash(view.as_ref(), "mkdir third").success());
        }
        assert!(view.root().join("app/src/lib.rs").exists());
        view.close().unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(other.join("lib.py")).unwrap(),
        "x = 1\n"
    );
}

/// No IPv4/IPv6/netlink/packet sockets at all; unix sockets work.
pub fn inet_sockets_fail(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let script = r#"
import socket
for name in ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET"]:
    try:
        socket.socket(getattr(socket, name), socket.SOCK_DGRAM if name != "AF_PACKET" else socket.SOCK_RAW)
        print(name, "OPEN")
    except OSError as error:
        print(name, "denied", error.errno)
a, b = socket.socketpair(socket.AF_UNIX)
a.send(b"unix-ok"); print(b.recv(10).decode())
"#;
    let output = run(view.as_ref(), python(script));
    let stdout = expect_success(&output);
    assert!(!stdout.contains("OPEN"), "{stdout}");
    assert!(stdout.contains("unix-ok"), "{stdout}");
    view.close().unwrap();
}

fn python(script: &str) -> CommandSpec {
    let mut command = CommandSpec::bash("", Duration::from_secs(30));
    command.argv = vec!["python3".into(), "-c".into(), script.into()];
    command
}

/// A TCP connection to a listener on the host's loopback fails, and the listener sees nothing.
pub fn tcp_to_a_host_listener_fails(sandbox: &Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let output = bash(
        view.as_ref(),
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
    );
    assert!(!output.success() && !text(&output.stdout).contains("CONNECTED"));
    let script = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\nexcept OSError as e:\n    print('failed', e)"
    );
    let stdout = text(&run(view.as_ref(), python(&script)).stdout);
    assert!(stdout.contains("failed"), "{stdout}");
    view.close().unwrap();
    match listener.accept() {
        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the host listener saw a connection: {other:?}"),
    }
}

/// Name resolution fails (no resolver, no network).
pub fn dns_fails(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    assert!(!bash(view.as_ref(), "getent hosts example.com").success());
    let stdout = text(
        &run(
            view.as_ref(),
            python("import socket\ntry:\n    print(socket.getaddrinfo('example.com', 443))\nexcept OSError as e:\n    print('failed', e)"),
        )
        .stdout,
    );
    assert!(stdout.contains("failed"), "{stdout}");
    view.close().unwrap();
}

/// Files of the host (a canary in the host's /tmp and, where we may write it, /root) are not
/// there, nor is /home.
pub fn host_files_are_absent(sandbox: &Backend) {
    let content = format!("canary-{}-{}", std::process::id(), line!());
    let tmp_canary = std::path::PathBuf::from(format!("/tmp/warden-canary-{}", std::process::id()));
    std::fs::write(&tmp_canary, &content).unwrap();
    let root_canary =
        std::path::PathBuf::from(format!("/root/warden-canary-{}", std::process::id()));
    let wrote_root = std::fs::write(&root_canary, &content).is_ok();
    if !wrote_root {
        eprintln!("note: cannot write /root as this user; checking only that /root is absent");
    }
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(true));
    let script = format!(
        "ls /tmp; cat {tmp} {root} 2>&1; ls /root /home 2>&1; grep -rs {content} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr -l; true",
        tmp = tmp_canary.display(),
        root = root_canary.display(),
    );
    let stdout = expect_success(&bash(view.as_ref(), &script));
    view.close().unwrap();
    let _ = std::fs::remove_file(&tmp_canary);
    if wrote_root {
        let _ = std::fs::remove_file(&root_canary);
    }
    assert!(
        !stdout.contains(&content),
        "a host canary is visible:\n{stdout}"
    );
    assert!(
        !stdout.contains("warden-canary-") || stdout.contains("No such file"),
        "{stdout}"
    );
}

/// `/proc` lists only the sandbox's own processes.
pub fn proc_shows_only_sandbox_processes(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let stdout = expect_success(&bash(
        view.as_ref(),
        "sleep 5 & for p in /proc/[0-9]*; do echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done; kill %1",
    ));
    view.close().unwrap();
    let processes: Vec<&str> = stdout.lines().collect();
    assert!(
        processes.len() <= 4,
        "too many processes visible: {processes:?}"
    );
    let host_pid = std::process::id().to_string();
    for line in &processes {
        let (pid, cmdline) = line.split_once(' ').unwrap_or((line, ""));
        assert!(
            pid.parse::<u32>().unwrap() < 100,
            "a host-looking pid: {line}"
        );
        assert!(
            cmdline.contains("bash")
                || cmdline.contains("sleep")
                || cmdline.contains("tr")
                || cmdline.is_empty(),
            "unexpected process {line} (host pid {host_pid})"
        );
    }
}

/// A fork bomb stops at the pids limit.
pub fn fork_bomb_stops_at_the_pids_limit(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let mut command = python(
        "import os, time\ncount = 0\ntry:\n    while count < 1000:\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(30); os._exit(0)\n        count += 1\nexcept OSError as e:\n    print('stopped', count, e.errno)\nelse:\n    print('unlimited', count)",
    );
    command.limits = ResourceLimits {
        pids: 24,
        ..ResourceLimits::default()
    };
    command.timeout = Duration::from_secs(20);
    let started = Instant::now();
    let output = run(view.as_ref(), command);
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("stopped"),
        "{stdout} {}",
        text(&output.stderr)
    );
    let count: u32 = stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(count <= 24, "forked {count} processes with a limit of 24");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the children outlived their parent"
    );
    // The classic bomb: it must end (by the timeout) and leave the host usable.
    let mut bomb = CommandSpec::bash(
        "bomb() { bomb | bomb & }; bomb; sleep 30",
        Duration::from_secs(2),
    );
    bomb.limits.pids = 32;
    let output = run(view.as_ref(), bomb);
    assert!(output.timed_out || !output.success());
    expect_success(&bash(view.as_ref(), "true"));
    view.close().unwrap();
}

/// A memory balloon is stopped at its limit (killed, or refused the memory).
pub fn memory_balloon_is_stopped(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let mut command = python("b = bytearray(768 << 20)\nprint('ALLOCATED', len(b))");
    command.limits.memory_bytes = 64 << 20;
    let output = run(view.as_ref(), command);
    view.close().unwrap();
    let stderr = text(&output.stderr);
    assert!(
        !text(&output.stdout).contains("ALLOCATED"),
        "the balloon got its memory"
    );
    assert!(
        output.signal == Some(9) || stderr.contains("MemoryError"),
        "neither killed nor refused: {output:?}"
    );
}

/// The timeout kills the whole tree: grandchildren that would write a marker later never do
/// (for isolating backends also ones that left the process group or ignore SIGTERM/SIGHUP).
pub fn timeout_kills_grandchildren(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(true));
    // gVisor takes a few hundred milliseconds to boot a sandbox; give the command time to start.
    let timeout = if sandbox.backend() == warden_sandbox::Backend::Gvisor {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(500)
    };
    let late = (timeout + Duration::from_secs(1)).as_secs_f64();
    let mut script = format!("(sleep {late}; echo late > marker-1) & ");
    // A process that leaves the command's process group (setsid) outlives a timeout in a pod,
    // until the view closes and the pod goes: a pod has one pid namespace for all its commands.
    if sandbox.backend().isolates() && sandbox.backend() != warden_sandbox::Backend::Kubernetes {
        script.push_str(&format!(
            "setsid sh -c 'sleep {late}; echo late > marker-2' & \
             nohup sh -c 'trap \"\" TERM HUP; sleep {late}; echo late > marker-3' >/dev/null 2>&1 & "
        ));
    }
    script.push_str("echo started; sleep 60");
    let started = Instant::now();
    let output = run(view.as_ref(), CommandSpec::bash(&script, timeout));
    assert!(output.timed_out, "{output:?}");
    assert_eq!(output.signal, Some(9));
    assert!(
        started.elapsed() < timeout + Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    assert!(text(&output.stdout).contains("started"), "{output:?}");
    std::thread::sleep(Duration::from_secs(2) + Duration::from_secs(1));
    let stdout = expect_success(&bash(view.as_ref(), "ls"));
    assert!(
        !stdout.contains("marker"),
        "a grandchild survived the timeout: {stdout}"
    );
    view.close().unwrap();
}

/// An output flood is truncated with the marker, and the command still completes.
pub fn output_flood_is_truncated(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let mut command = CommandSpec::bash(
        "yes flood | head -c 20000000; echo done >&2",
        Duration::from_secs(30),
    );
    command.output_limit = 10_000;
    let mut streamed = 0usize;
    let output = view
        .run_streaming(&command, &mut |stream, data| {
            if stream == Stream::Stdout {
                streamed += data.len();
            }
        })
        .unwrap();
    view.close().unwrap();
    assert!(output.success(), "{output:?}");
    assert!(output.truncated);
    let stdout = text(&output.stdout);
    assert!(
        stdout.ends_with("[output truncated at 10000 bytes]\n"),
        "{}",
        &stdout[stdout.len().saturating_sub(100)..]
    );
    assert!(output.stdout.len() + output.stderr.len() <= 10_000 + 2 * 40);
    assert_eq!(streamed, output.stdout.len());
}

/// The command's environment is exactly the caller's allow-list.
pub fn environment_is_exactly_the_allow_list(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let mut command = CommandSpec::bash("", Duration::from_secs(30));
    command.argv = vec!["/usr/bin/env".into()];
    command.env = vec![("ONLY".into(), "this".into())];
    let stdout = expect_success(&run(view.as_ref(), command));
    view.close().unwrap();
    // runsc, like other OCI runtimes, supplies HOME when the list has none (its own value, not
    // the host's).
    let stdout = if sandbox.backend() == warden_sandbox::Backend::Gvisor {
        stdout.replace("HOME=/root\n", "")
    } else {
        stdout
    };
    assert_eq!(stdout, "ONLY=this\n");
}

/// Nothing of the host environment enters: not the canary key set in this process, not
/// through `/proc`. Runs in a child test process that has the key in its environment.
pub fn model_key_is_absent(sandbox: &Backend) {
    assert_eq!(
        std::env::var("OPENAI_API_KEY").as_deref(),
        Ok(CANARY_KEY),
        "run through the re-exec"
    );
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let host_pid = std::process::id();
    let script = format!(
        "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/{host_pid}/environ 2>&1; \
         cat /proc/1/environ | tr '\\0' '\\n'; true"
    );
    let output = bash(view.as_ref(), &script);
    view.close().unwrap();
    let all = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(
        !all.contains(CANARY_KEY) && !all.contains("OPENAI_API_KEY"),
        "the key leaked:\n{all}"
    );
}

/// The host process (Warden) cannot be traced or its memory read from inside.
pub fn ptrace_of_the_host_is_impossible(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    let host_pid = std::process::id();
    let script = format!(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         for pid in ({host_pid}, 1, os.getppid()):\n    r = libc.ptrace(16, pid, 0, 0)\n    print(pid, r, ctypes.get_errno())\n\
         try:\n    open('/proc/{host_pid}/mem', 'rb').read(1); print('MEM-READ')\nexcept OSError as e:\n    print('mem denied', e.errno)"
    );
    let output = run(view.as_ref(), python(&script));
    view.close().unwrap();
    let stdout = expect_success(&output);
    for line in stdout.lines().filter(|l| !l.starts_with("mem")) {
        let result: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(result.get(1), Some(&"-1"), "ptrace succeeded: {line}");
    }
    assert!(!stdout.contains("MEM-READ"), "{stdout}");
}

/// Exit codes, the working directory, the exact environment and a missing program.
pub fn commands_behave(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(false));
    assert_eq!(bash(view.as_ref(), "exit 3").exit_code, Some(3));
    let mut in_src = CommandSpec::bash("pwd; ls", Duration::from_secs(10));
    in_src.cwd = "src".into();
    let stdout = expect_success(&run(view.as_ref(), in_src));
    assert!(stdout.ends_with("lib.rs\n"), "{stdout}");
    assert!(
        stdout.starts_with(&view_path(sandbox, view.as_ref(), "src")),
        "{stdout}"
    );
    let mut missing = CommandSpec::bash("", Duration::from_secs(10));
    missing.argv = vec!["no-such-program-xyz".into()];
    let output = run(view.as_ref(), missing);
    assert_eq!(output.exit_code, Some(127), "{output:?}");
    assert!(text(&output.stderr).contains("no-such-program-xyz"));
    let mut bad_cwd = CommandSpec::bash("true", Duration::from_secs(10));
    bad_cwd.cwd = "../..".into();
    assert!(view.run(&bad_cwd).is_err());
    view.close().unwrap();
}

/// What a command's standard output must satisfy.
type Expectation = dyn Fn(&str) -> bool;

/// The everyday file tools work on the working root, read-only and writable: a long listing
/// (`ls -la`, also by absolute path), `stat`, `find` and `du` — the commands of
/// [`warden_sandbox::TOOLS_PROBE`], which `warden doctor` runs per backend. gVisor releases
/// before [`warden_sandbox::MIN_RUNSC_RELEASE`] fail `ls -l` and `stat` ("Invalid argument":
/// their `statx` refuses `AT_NO_AUTOMOUNT`). With such a runsc this check demands exactly that
/// failure, reported as a KNOWN FAILURE, and that the probe names the release to install; with a
/// newer one, or on any other backend, every command must work.
pub fn file_tools_list_the_working_root(sandbox: &Backend) {
    let fixture = Fixture::new();
    let defect = if sandbox.backend() == warden_sandbox::Backend::Gvisor {
        warden_sandbox::runsc_statx_defect(&super::support::config())
    } else {
        None
    };
    for writable in [false, true] {
        let view = open!(sandbox, fixture.view(writable));
        let root = view_path(sandbox, view.as_ref(), "");
        let checks: [(String, &Expectation); 8] = [
            ("ls -la".into(), &|out| {
                out.contains(" README.md\n")
                    && out.contains(" run.sh\n")
                    && out
                        .lines()
                        .any(|l| l.starts_with('d') && l.ends_with(" src"))
            }),
            (format!("ls -l {root}"), &|out| out.contains(" README.md\n")),
            ("ls -la src".into(), &|out| out.contains(" lib.rs\n")),
            ("stat .".into(), &|out| out.contains("directory")),
            ("stat -c %s README.md".into(), &|out| out == "10\n"),
            ("find .".into(), &|out| {
                out.lines().any(|l| l == "./src/lib.rs") && out.lines().any(|l| l == "./run.sh")
            }),
            ("du -s .".into(), &|out| {
                out.ends_with("\t.\n")
                    && out
                        .split('\t')
                        .next()
                        .is_some_and(|n| n.parse::<u64>().is_ok())
            }),
            ("du -a .".into(), &|out| out.contains("\t./src/lib.rs\n")),
        ];
        for (command, expected) in checks {
            let output = bash(view.as_ref(), &command);
            let statx_flag = command.starts_with("ls -l") || command.starts_with("stat");
            match &defect {
                Some(defect) if statx_flag => {
                    assert!(
                        !output.success() && text(&output.stderr).contains("Invalid argument"),
                        "`{command}` was expected to fail ({defect}) but: {output:?}"
                    );
                    eprintln!(
                        "KNOWN FAILURE on gvisor: `{command}`: {} — {defect}",
                        text(&output.stderr).lines().next().unwrap_or_default()
                    );
                }
                _ => {
                    let stdout = expect_success(&output);
                    assert!(expected(&stdout), "`{command}` printed:\n{stdout}");
                }
            }
        }
        view.close().unwrap();
    }
    if defect.is_some() {
        let report = warden_sandbox::probe_tools(&super::support::config())
            .into_iter()
            .find(|r| r.backend == warden_sandbox::Backend::Gvisor)
            .unwrap();
        assert!(
            !report.works
                && report.detail.contains("`ls -la .`: ls: cannot access")
                && report.detail.contains(warden_sandbox::MIN_RUNSC_RELEASE),
            "the probe does not report the known defect: {report:?}"
        );
    }
}

fn view_path(sandbox: &Backend, view: &dyn SandboxView, relative: &str) -> String {
    if sandbox.backend().isolates() {
        format!("{WORKING_ROOT}/{relative}")
    } else {
        view.root().join(relative).to_string_lossy().into_owned()
    }
}

/// Several commands at once in one view.
pub fn concurrent_commands(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(true));
    std::thread::scope(|scope| {
        for index in 0..6 {
            let view = &view;
            scope.spawn(move || {
                let stdout = expect_success(&bash(
                    view.as_ref(),
                    &format!("echo {index} > f{index}; cat f{index}"),
                ));
                assert_eq!(stdout, format!("{index}\n"));
            });
        }
    });
    view.close().unwrap();
}

/// `cancel` kills a running command and its children at once (long before its timeout) and
/// every later command of the view returns killed without running.
pub fn cancel_kills_running_commands_and_refuses_new_ones(sandbox: &Backend) {
    let fixture = Fixture::new();
    let view = open!(sandbox, fixture.view(true));
    let output = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            run(
                view.as_ref(),
                CommandSpec::bash(
                    "(sleep 3; echo late > marker) & echo started; sleep 120",
                    Duration::from_secs(120),
                ),
            )
        });
        // Cancel once the command is under way (gVisor needs a moment to boot).
        std::thread::sleep(if sandbox.backend() == warden_sandbox::Backend::Gvisor {
            Duration::from_secs(3)
        } else {
            Duration::from_millis(500)
        });
        view.cancel();
        running.join().unwrap()
    });
    assert!(!output.timed_out, "{output:?}");
    assert_eq!(output.signal, Some(9), "{output:?}");
    assert!(
        text(&output.stderr).contains("cancelled"),
        "{}",
        text(&output.stderr)
    );
    let refused = run(
        view.as_ref(),
        CommandSpec::bash("echo ran > ran", Duration::from_secs(10)),
    );
    assert_eq!(refused.signal, Some(9), "{refused:?}");
    // The killed command's child would write its marker after 3 s.
    std::thread::sleep(Duration::from_secs(4));
    for written in ["marker", "ran"] {
        assert!(
            !view.root().join(written).exists(),
            "{written} was written after the cancellation"
        );
    }
    view.close().unwrap();
}

const QUOTA: warden_sandbox::DiskQuota = warden_sandbox::DiskQuota {
    bytes: 8 << 20,
    inodes: 300,
};

fn no_space(output: &warden_sandbox::CommandOutput) -> bool {
    !output.success() && text(&output.stderr).contains("No space left on device")
}

/// A command writing past the view's writable space gets `ENOSPC` — in `/tmp` and in the
/// copy-on-write layer alike, which share one budget — as does a host-side write through the
/// view's root; freeing space makes room again, and nothing of it lands on the host's disk.
pub fn disk_quota_stops_writes_with_enospc(sandbox: &Backend) {
    let sandbox = super::support::with_quota(sandbox.backend(), QUOTA);
    let fixture = Fixture::new();
    // A read-only view's /tmp has the limit too.
    let view = open!(&sandbox, fixture.view(false));
    let output = bash(view.as_ref(), "head -c 64M /dev/zero > /tmp/fill");
    assert!(no_space(&output), "{output:?}");
    view.close().unwrap();
    let spec = fixture.view(true);
    let view = open!(&sandbox, spec);
    for target in ["/tmp/fill", "fill", "/dev/shm/fill"] {
        let output = bash(view.as_ref(), &format!("head -c 64M /dev/zero > {target}"));
        assert!(no_space(&output), "{target}: {output:?}");
        // The part that fit is there; freeing it makes room again.
        expect_success(&bash(
            view.as_ref(),
            &format!(
                "test -s {target} && rm {target} && head -c 1M /dev/zero > {target} && rm {target}"
            ),
        ));
    }
    // Half in /tmp, half in the working tree: one budget.
    expect_success(&bash(view.as_ref(), "head -c 5M /dev/zero > /tmp/half"));
    let output = bash(view.as_ref(), "head -c 5M /dev/zero > half");
    assert!(no_space(&output), "{output:?}");
    // The host side (tools writing files) meets the same limit.
    let host_write = std::fs::write(view.root().join("host-side"), vec![0u8; 16 << 20]);
    assert_eq!(
        host_write.map_err(|e| e.raw_os_error()),
        Err(Some(libc_enospc())),
        "a host-side write past the quota"
    );
    assert!(
        super::support::host_bytes(&spec.scratch_dir) < 1 << 20,
        "the writes landed on the host's disk: {} bytes under {}",
        super::support::host_bytes(&spec.scratch_dir),
        spec.scratch_dir.display()
    );
    view.close().unwrap();
}

fn libc_enospc() -> i32 {
    28
}

/// Creating files and directories stops at the inode limit with `ENOSPC`, in `/tmp` and in the
/// working tree.
pub fn inode_quota_stops_file_creation(sandbox: &Backend) {
    let sandbox = super::support::with_quota(sandbox.backend(), QUOTA);
    let fixture = Fixture::new();
    let view = open!(&sandbox, fixture.view(true));
    for (dir, make) in [("/tmp/many", ": >"), ("many", "mkdir")] {
        let output = bash(
            view.as_ref(),
            &format!("mkdir {dir} && for i in $(seq 1 1000); do {make} {dir}/f$i || exit 3; done"),
        );
        assert_eq!(output.exit_code, Some(3), "{dir}: {output:?}");
        assert!(no_space(&output), "{dir}: {output:?}");
        let created = expect_success(&bash(
            view.as_ref(),
            &format!("shopt -s nullglob; entries=({dir}/*); echo ${{#entries[@]}}"),
        ));
        let created: u64 = created.trim().parse().unwrap();
        assert!(
            (100..=QUOTA.inodes).contains(&created),
            "{dir}: {created} entries"
        );
        expect_success(&bash(
            view.as_ref(),
            &format!("rm -rf {dir} && touch {dir}"),
        ));
    }
    view.close().unwrap();
}

/// A host directory with an executable `bin/faketool`, a data file and an unmounted sibling
/// holding a canary, all in the fixture's temporary directory.
fn fake_toolchain(fixture: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let tool = fixture.dir.path().join("toolchain");
    std::fs::create_dir_all(tool.join("bin")).unwrap();
    let script = tool.join("bin/faketool");
    std::fs::write(&script, "#!/bin/sh\necho faketool-ran \"$@\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tool.join("data.txt"), "toolchain data\n").unwrap();
    let sibling = fixture.dir.path().join("unmounted");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("canary.txt"), "unmounted-canary\n").unwrap();
    (tool, sibling)
}

/// A mounted directory is readable and executable at its host path, not writable (nor
/// through its executables); a host path beside it stays invisible.
pub fn mounted_directories_are_read_only(sandbox: &Backend) {
    let fixture = Fixture::new();
    let (tool, sibling) = fake_toolchain(&fixture);
    for writable_view in [false, true] {
        let mut spec = fixture.view(writable_view);
        spec.mounts = vec![warden_sandbox::Mount::read_only(&tool)];
        let view = open!(sandbox, spec);
        let tool_path = tool.display();
        let out = expect_success(&bash(
            view.as_ref(),
            &format!("PATH={tool_path}/bin:$PATH faketool hello && cat {tool_path}/data.txt"),
        ));
        assert!(out.contains("faketool-ran hello"), "{out}");
        assert!(out.contains("toolchain data"), "{out}");
        for script in [
            format!("echo x > {tool_path}/data.txt"),
            format!("echo x >> {tool_path}/bin/faketool"),
            format!("touch {tool_path}/new-file"),
            format!("mkdir {tool_path}/new-dir"),
            format!("rm -f {tool_path}/data.txt"),
            format!("chmod 777 {tool_path}/bin/faketool"),
        ] {
            let output = bash(view.as_ref(), &script);
            assert!(!output.success(), "{script} succeeded on a read-only mount");
        }
        let out = bash(
            view.as_ref(),
            &format!(
                "cat {}/canary.txt 2>&1; ls {} 2>&1",
                sibling.display(),
                sibling.display()
            ),
        );
        assert!(
            !text(&out.stdout).contains("unmounted-canary"),
            "{}",
            text(&out.stdout)
        );
        view.close().unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(tool.join("data.txt")).unwrap(),
        "toolchain data\n"
    );
    assert!(!tool.join("new-file").exists());
}

/// A writable mount (a dependency cache being filled) takes writes, which land on the host.
pub fn writable_mounts_take_writes(sandbox: &Backend) {
    let fixture = Fixture::new();
    let cache = fixture.dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let mut spec = fixture.view(true);
    spec.mounts = vec![warden_sandbox::Mount {
        path: cache.clone(),
        writable: true,
        source: None,
    }];
    let view = open!(sandbox, spec);
    expect_success(&bash(
        view.as_ref(),
        &format!(
            "mkdir -p {0}/registry && echo fetched > {0}/registry/crate",
            cache.display()
        ),
    ));
    view.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(cache.join("registry/crate")).unwrap(),
        "fetched\n"
    );
}

/// A mount with a `source` shows that host directory at `path` (where another directory is, or
/// nothing is, on the host): writes land in the source, and the directory at `path` is not
/// touched. A backend that cannot move mounts refuses the view.
pub fn a_moved_mount_shows_its_source_at_its_path(sandbox: &Backend) {
    let fixture = Fixture::new();
    let shared = fixture.dir.path().join("caches/key");
    let own = fixture.dir.path().join("caches/key-task-1");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(shared.join("which"), "shared\n").unwrap();
    std::fs::write(own.join("which"), "own\n").unwrap();
    let mut spec = fixture.view(true);
    spec.mounts = vec![warden_sandbox::Mount {
        path: shared.clone(),
        writable: true,
        source: Some(own.clone()),
    }];
    if !sandbox.moves_mounts() {
        let refused = sandbox.open(&spec).err().expect("refused");
        assert!(
            refused
                .to_string()
                .contains("cannot show another directory"),
            "{refused}"
        );
        return;
    }
    let view = open!(sandbox, spec);
    let out = bash(
        view.as_ref(),
        &format!(
            "cat {0}/which && echo fetched > {0}/crate",
            shared.display()
        ),
    );
    expect_success(&out);
    assert_eq!(text(&out.stdout), "own\n");
    view.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(own.join("crate")).unwrap(),
        "fetched\n"
    );
    assert!(!shared.join("crate").exists());
    assert_eq!(
        std::fs::read_to_string(shared.join("which")).unwrap(),
        "shared\n"
    );
}

/// Mounts that would show the host's root, Warden's own state (snapshots, the scratch
/// directory) or a directory the sandbox builds itself are refused when the view opens.
pub fn dangerous_mounts_are_refused(sandbox: &Backend) {
    let fixture = Fixture::new();
    let (tool, _) = fake_toolchain(&fixture);
    let refused = |mounts: Vec<warden_sandbox::Mount>, expect: &str| {
        let mut spec = fixture.view(false);
        spec.mounts = mounts.clone();
        match sandbox.open(&spec) {
            Ok(view) => {
                view.close().unwrap();
                panic!("{mounts:?} was accepted");
            }
            Err(error) => {
                let message = error.to_string();
                assert!(error.layer().is_none(), "{mounts:?}: {message}");
                assert!(message.contains(expect), "{mounts:?}: {message}");
            }
        }
    };
    let ro = |path: std::path::PathBuf| warden_sandbox::Mount::read_only(path);
    refused(vec![ro("/".into())], "whole host");
    // The fixture directory holds the snapshot and the scratch directory, like WARDEN_HOME.
    refused(vec![ro(fixture.dir.path().into())], "overlaps the snapshot");
    refused(
        vec![ro(fixture.snapshot.join("src"))],
        "overlaps the snapshot",
    );
    refused(vec![ro("/proc/self".into())], "/proc");
    refused(vec![ro("/dev".into())], "/dev");
    refused(vec![ro("/etc/ssl".into())], "/etc");
    refused(vec![ro(format!("{WORKING_ROOT}/x").into())], WORKING_ROOT);
    refused(vec![ro("relative/dir".into())], "absolute");
    refused(vec![ro(tool.join("../toolchain"))], "absolute");
    refused(vec![ro(tool.join("missing"))], "missing");
    refused(vec![ro(tool.join("data.txt"))], "not a directory");
    refused(vec![ro(tool.clone()), ro(tool.join("bin"))], "inside mount");
}

/// A long-lived command speaks over a pipe: each line written to its stdin comes back on its
/// stdout while it runs (what an MCP server over stdio needs), it sees no network while it
/// does, and its kill switch stops it (with a note) before its timeout.
pub fn piped_command_converses_and_is_killed_on_demand(sandbox: &Backend) {
    use std::io::Write;
    let fixture = Fixture::new();
    let view: Arc<Box<dyn SandboxView>> = Arc::new(open!(sandbox, fixture.view(false)));
    let (reader, mut writer) = std::io::pipe().unwrap();
    let switch = warden_sandbox::KillSwitch::new();
    let mut command = CommandSpec::bash(
        "while IFS= read -r line; do echo \"got $line\"; done; sleep 600",
        Duration::from_secs(120),
    );
    command.stdin = Some(warden_sandbox::Stdin(Arc::new(reader.into())));
    command.kill = Some(switch.clone());
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let runner = {
        let view = view.clone();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            view.run_streaming(&command, &mut |stream, data| {
                if stream == Stream::Stdout {
                    pending.extend_from_slice(data);
                    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        let _ = lines_tx.send(String::from_utf8_lossy(&line).trim_end().into());
                    }
                }
            })
        })
    };
    for word in ["one", "two"] {
        writeln!(writer, "{word}").unwrap();
        let line = lines_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(line, format!("got {word}"));
    }
    let started = Instant::now();
    switch.kill();
    let output = runner.join().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "{output:?}");
    assert_eq!(output.signal, Some(9), "{output:?}");
    assert!(!output.timed_out);
    assert!(
        text(&output.stderr).contains("stopped by its caller"),
        "{output:?}"
    );
    drop(writer);
    match Arc::try_unwrap(view) {
        Ok(view) => view.close().unwrap(),
        Err(_) => panic!("the view is still shared"),
    }
}
