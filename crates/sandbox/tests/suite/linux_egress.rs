//! The `linux` backend's egress relay (`ViewSpec::egress_proxy`): a command in a relay view
//! reaches the one proxy through `127.0.0.1:3128` of its own network namespace, and nothing
//! else; a command in any other view reaches nothing; the relay ends with the command. (Named
//! `linux_*` so the uid-65534 re-runs of the linux suite include it.)

use super::support::{bash, expect_success, text, Fixture};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use warden_sandbox::{Backend, ViewSpec};

/// The relay's threads are counted by name: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A stand-in for the operator's proxy: records each connection's first line, answers it, and
/// reports when each connection ended (end of file from the relay).
struct FakeProxy {
    address: String,
    requests: Arc<Mutex<Vec<String>>>,
    ended: Arc<Mutex<usize>>,
}

impl FakeProxy {
    /// `answer`: whether to reply and close, or to keep the connection open, reading until the
    /// other side ends it.
    fn start(answer: bool) -> FakeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(0));
        let (seen, done) = (Arc::clone(&requests), Arc::clone(&ended));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (seen, done) = (Arc::clone(&seen), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                    seen.lock().unwrap().push(line.trim_end().to_string());
                    if answer {
                        let _ = stream.write_all(
                            b"HTTP/1.0 200 OK\r\nContent-Length: 22\r\n\r\nfetched through proxy\n",
                        );
                        return;
                    }
                    let mut rest = Vec::new();
                    let _ = reader.read_to_end(&mut rest);
                    *done.lock().unwrap() += 1;
                });
            }
        });
        FakeProxy {
            address,
            requests,
            ended,
        }
    }

    fn port(&self) -> u16 {
        self.address.rsplit_once(':').unwrap().1.parse().unwrap()
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits up to 10 s for `n` connections to have been ended by the relay.
    fn wait_ended(&self, n: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if *self.ended.lock().unwrap() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn relay_view(fixture: &Fixture, proxy: &FakeProxy, name: &str) -> ViewSpec {
    ViewSpec {
        scratch_dir: fixture.scratch(name),
        egress_proxy: Some(proxy.address.clone()),
        ..fixture.view(true)
    }
}

/// A GET through `/dev/tcp` to `address` (`host/port`), printing the reply.
fn fetch(address: &str) -> String {
    format!(
        "exec 3<>/dev/tcp/{address} || exit 7; printf 'GET http://deps.example/crate HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    )
}

/// The relay's threads in this process (thread names are cut at 15 bytes).
fn relay_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("warden-egress"))
        .count()
}

fn wait_no_relay_threads() -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if relay_threads() == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_relay_view_reaches_the_proxy_and_nothing_else() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let _serial = serial();
    assert!(sandbox.relays_egress());
    let proxy = FakeProxy::start(true);
    let fixture = Fixture::new();
    let view = sandbox
        .open(&relay_view(&fixture, &proxy, "relay"))
        .unwrap();
    assert_eq!(view.egress_address().as_deref(), Some("127.0.0.1:3128"));

    let output = bash(view.as_ref(), &fetch("127.0.0.1/3128"));
    let stdout = expect_success(&output);
    assert!(stdout.contains("fetched through proxy"), "{stdout}");
    assert_eq!(output.egress_connections, 1);
    assert_eq!(
        proxy.requests(),
        vec!["GET http://deps.example/crate HTTP/1.0".to_string()]
    );

    // Anything else is out of reach: the proxy's own address (it is the host's loopback, not
    // the sandbox's), another port of the sandbox's loopback, another address.
    for address in [
        format!("127.0.0.1/{}", proxy.port()),
        "127.0.0.1/3129".to_string(),
        "10.0.0.1/3128".to_string(),
        "192.0.2.1/80".to_string(),
    ] {
        let command = warden_sandbox::CommandSpec::bash(&fetch(&address), Duration::from_secs(10));
        let output = view.run(&command).unwrap();
        assert!(
            !output.success() && !text(&output.stdout).contains("fetched"),
            "{address}: {output:?}"
        );
        assert_eq!(output.egress_connections, 0, "{address}");
    }
    // Nothing may listen: the relay's port is taken and bind is refused (Landlock ABI >= 4)
    // or at least cannot take the relay's port.
    let output = bash(
        view.as_ref(),
        "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 3128)); print('BOUND')\"",
    );
    assert!(!text(&output.stdout).contains("BOUND"), "{output:?}");
    // Only streams: a UDP socket is refused by seccomp.
    let output = bash(
        view.as_ref(),
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print('UDP')\"",
    );
    assert!(!text(&output.stdout).contains("UDP"), "{output:?}");
    assert_eq!(proxy.requests().len(), 1, "{:?}", proxy.requests());
    view.close().unwrap();
    assert!(wait_no_relay_threads(), "relay threads left behind");
}

#[test]
fn a_view_without_a_relay_cannot_reach_the_relay_port_or_the_proxy() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let proxy = FakeProxy::start(true);
    let fixture = Fixture::new();
    let view = sandbox.open(&fixture.view(true)).unwrap();
    assert_eq!(view.egress_address(), None);
    for address in [
        "127.0.0.1/3128".to_string(),
        format!("127.0.0.1/{}", proxy.port()),
    ] {
        let output = bash(view.as_ref(), &fetch(&address));
        assert!(!output.success(), "{address}: {output:?}");
        assert!(!text(&output.stdout).contains("fetched"), "{output:?}");
        assert_eq!(output.egress_connections, 0);
    }
    view.close().unwrap();
    assert!(proxy.requests().is_empty(), "{:?}", proxy.requests());
}

#[test]
fn the_relay_ends_with_the_command() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let _serial = serial();
    // A proxy that never answers: the connection stays open until the relay ends it.
    let proxy = FakeProxy::start(false);
    let fixture = Fixture::new();
    let view = sandbox
        .open(&relay_view(&fixture, &proxy, "relay-ends"))
        .unwrap();
    // A background process keeps the connection and waits; the command itself times out.
    let command = warden_sandbox::CommandSpec::bash(
        "exec 3<>/dev/tcp/127.0.0.1/3128 && echo 'CONNECT deps.example:443 HTTP/1.1' >&3 && \
         (sleep 600 <&3 &) && sleep 600",
        Duration::from_secs(3),
    );
    let output = view.run(&command).unwrap();
    assert!(output.timed_out, "{output:?}");
    assert_eq!(output.egress_connections, 1);
    assert!(proxy.wait_ended(1), "the proxy's connection stayed open");
    assert_eq!(
        proxy.requests(),
        vec!["CONNECT deps.example:443 HTTP/1.1".to_string()]
    );
    assert!(wait_no_relay_threads(), "relay threads left behind");
    view.close().unwrap();
    // Nothing listens for the view any more: the relay's port was in the command's own
    // network namespace, gone with it, and the proxy sees no new connection.
    assert_eq!(proxy.requests().len(), 1);
    assert!(TcpStream::connect(("127.0.0.1", 3128)).is_err() || host_has_3128());
}

/// Whether something of the host listens on 3128 (a real proxy on a developer machine): then
/// the check above says nothing, and it is not the relay's.
fn host_has_3128() -> bool {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .any(|line| line.contains(":0C38 ") && line.contains(" 0A "))
}
