//! The front door of `warden serve` under hostile callers, on the real binary over loopback:
//! a flood of idle sockets beyond the open-file limit, slow-header clients and thousands of
//! event-stream attempts while a client with a token keeps being served; a flood from one
//! address far beyond the connection cap while a client with a token opens a new connection
//! per request; bootstrap tokens too short to be safe are refused at start-up; a foreign
//! `Host` is 421, a foreign `Origin` 403, and failed authentications from one address are
//! throttled while its valid token passes.
//!
//! The server tells clients apart by address, and every address of 127.0.0.0/8 is this host:
//! the client with a token connects from [`CLIENT_ADDRESS`], floods from other loopback
//! addresses.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::server_harness::{Server, Token, ADMIN};
use super::support::Warden;

const MALLORY: &str = "mallory-token-0123456789-0123456789";
const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("mallory", "operator", MALLORY)];

/// How long any one exchange may take before the test calls it a failure: generous, as the
/// machine is busy with the flood; the old server never answered at all.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The loopback address the client with a token connects from.
const CLIENT_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A connection to `to` from `from` (a loopback address: all of 127.0.0.0/8 is this host).
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
    }
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(from, 0))?;
            let stream = tokio::time::timeout(EXCHANGE_TIMEOUT, socket.connect(to))
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??
                .into_std()?;
            stream.set_nonblocking(false)?;
            Ok(stream)
        })
    })
}

fn write_config(warden: &Warden, text: &str) {
    std::fs::write(warden.home.path().join("warden.toml"), text).unwrap();
}

/// Raises this test process's own open-file limit so that it can hold the flood.
fn raise_own_open_files(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    let current = limit.current.unwrap_or(u64::MAX);
    if current < wanted {
        let target = wanted.min(hard);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: limit.maximum,
            },
        )
        .unwrap();
        assert!(
            target >= wanted,
            "the test needs {wanted} open files; the hard limit is {hard}"
        );
    }
}

/// A status line and the body, read with `Content-Length` from `reader` (one response of a
/// kept-alive connection, or the only one).
fn read_one_response(reader: &mut BufReader<TcpStream>) -> std::io::Result<(u16, String)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// One request on a fresh connection: its status and body, or what went wrong.
fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    exchange_on(stream, addr, method, path, headers)
}

/// [`exchange`] from the address `from`.
fn exchange_from(
    from: IpAddr,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    let to = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
    let stream = connect_from(from, to).map_err(|e| format!("connect: {e}"))?;
    exchange_on(stream, addr, method, path, headers)
}

/// One request on `stream` (with `Connection: close`): its status and body.
fn exchange_on(
    stream: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" {
        request.push_str("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    } else {
        request.push_str("\r\n");
    }
    (&stream)
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    read_one_response(&mut BufReader::new(stream)).map_err(|e| format!("read: {e}"))
}

/// What is left until `deadline` (at least a millisecond: a zero timeout means none).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Whether the server closed `stream` (end of file or a reset) by `deadline`.
fn closed_by_server(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut buffer = [0u8; 256];
    loop {
        stream.set_read_timeout(Some(left(deadline))).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            // A 408 or similar before the close is fine too.
            Ok(_) => continue,
            Err(error) => {
                return matches!(
                    error.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                )
            }
        }
    }
}

/// A client with a token, as a user runs one during the attack (from [`CLIENT_ADDRESS`]):
/// fresh connections for `/healthz` and `GET /v1/tasks`, and one kept-alive connection it
/// keeps using. Every failure is recorded.
struct ValidClient {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl ValidClient {
    fn start(addr: &str) -> ValidClient {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        {
            let (addr, stop, served, failures) = (
                addr.to_string(),
                Arc::clone(&stop),
                Arc::clone(&served),
                Arc::clone(&failures),
            );
            threads.push(std::thread::spawn(move || {
                let bearer = format!("Bearer {ADMIN}");
                while !stop.load(Ordering::Acquire) {
                    for (path, headers) in [
                        ("/healthz", vec![]),
                        ("/v1/tasks", vec![("Authorization", bearer.as_str())]),
                    ] {
                        match exchange_from(CLIENT_ADDRESS, &addr, "GET", path, &headers) {
                            Ok((200, _)) => {
                                served.fetch_add(1, Ordering::AcqRel);
                            }
                            Ok((status, body)) => failures
                                .lock()
                                .unwrap()
                                .push(format!("{path}: {status} {body}")),
                            Err(error) => failures.lock().unwrap().push(format!("{path}: {error}")),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        {
            let (addr, stop, served, failures) = (
                addr.to_string(),
                Arc::clone(&stop),
                Arc::clone(&served),
                Arc::clone(&failures),
            );
            threads.push(std::thread::spawn(move || {
                let stream = connect_from(CLIENT_ADDRESS, addr.parse().unwrap()).unwrap();
                stream.set_read_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let request = format!(
                    "GET /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN}\r\n\r\n"
                );
                while !stop.load(Ordering::Acquire) {
                    let result = writer
                        .write_all(request.as_bytes())
                        .and_then(|()| read_one_response(&mut reader));
                    match result {
                        Ok((200, _)) => {
                            served.fetch_add(1, Ordering::AcqRel);
                        }
                        Ok((status, body)) => failures
                            .lock()
                            .unwrap()
                            .push(format!("kept-alive /v1/tasks: {status} {body}")),
                        Err(error) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("kept-alive /v1/tasks: {error}"));
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }));
        }
        ValidClient {
            stop,
            served,
            failures,
            threads,
        }
    }

    /// Stops the client: how many requests were served, and every failure.
    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads {
            thread.join().unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.served.load(Ordering::Acquire), failures)
    }
}

#[test]
fn a_flood_of_idle_slow_and_streaming_connections_does_not_starve_a_client_with_a_token() {
    // The server may hold 1024 files: a cap of 1024 - 320 connections; the flood opens more.
    const SERVER_OPEN_FILES: u64 = 1024;
    const IDLE_SOCKETS: usize = 2000;
    // The idle sockets come from this many addresses, each within its share of anonymous
    // connections (704 / 16 = 44), so that together they reach the cap.
    const IDLE_ADDRESSES: usize = 50;
    const SLOW_CLIENTS: usize = 100;
    const STREAM_ATTEMPTS: usize = 5000;
    const STREAMS_PER_TOKEN: usize = 4;
    raise_own_open_files(8192);
    let warden = Warden::faux();
    write_config(
        &warden,
        "[serve]\nworkers = 1\nheader_timeout_secs = 2\nkeep_alive_secs = 10\n\
         max_streams_per_token = 4\nrate_limit_per_minute = 1000000\nrate_limit_burst = 100000\n",
    );
    let server = Server::start_with_open_files(&warden, TOKENS, SERVER_OPEN_FILES);
    let addr = server.addr().to_string();
    let socket: SocketAddr = addr.parse().unwrap();
    assert_eq!(exchange(&addr, "GET", "/healthz", &[]).unwrap().0, 200);
    let client = ValidClient::start(&addr);
    // Bounds the flood even against a server that stops answering (as the old one did).
    let deadline = Instant::now() + Duration::from_secs(120);

    // Slow headers from one address: a byte at a time, never finishing the head.
    let slow = std::thread::spawn(move || {
        let from = IpAddr::V4(Ipv4Addr::new(127, 2, 0, 1));
        let mut streams: Vec<TcpStream> = (0..SLOW_CLIENTS)
            .filter_map(|_| connect_from(from, socket).ok())
            .collect();
        for stream in &streams {
            stream.set_write_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
        }
        let head = b"GET /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ";
        let mut open = vec![true; streams.len()];
        let mut index = 0;
        while open.iter().any(|o| *o) && Instant::now() < deadline {
            let byte = [head[index % head.len()]];
            for (stream, open) in streams.iter_mut().zip(open.iter_mut()) {
                if *open && stream.write_all(&byte).is_err() {
                    *open = false;
                }
            }
            index += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        open.iter().filter(|o| **o).count()
    });

    // Event-stream attempts: a valid token beyond its stream cap, and anonymous ones.
    let held_streams = Arc::new(Mutex::new(Vec::new()));
    let attempts: Vec<_> = (0..8)
        .map(|thread| {
            let held = Arc::clone(&held_streams);
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<String, usize>::new();
                for attempt in 0..STREAM_ATTEMPTS / 8 {
                    if Instant::now() >= deadline {
                        *statuses.entry("out of time".into()).or_default() += 1;
                        break;
                    }
                    let token = match (thread + attempt) % 3 {
                        0 => Some(MALLORY),
                        1 => Some("guessed-token-0123456789-0123456789"),
                        _ => None,
                    };
                    let Ok(stream) = TcpStream::connect_timeout(&socket, left(deadline)) else {
                        *statuses.entry("connect failed".into()).or_default() += 1;
                        continue;
                    };
                    stream.set_read_timeout(Some(left(deadline))).unwrap();
                    let mut request = format!("GET /v1/events HTTP/1.1\r\nHost: {socket}\r\n");
                    if let Some(token) = token {
                        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
                    }
                    request.push_str("\r\n");
                    if (&stream).write_all(request.as_bytes()).is_err() {
                        *statuses.entry("write failed".into()).or_default() += 1;
                        continue;
                    }
                    let mut reader = BufReader::new(stream);
                    let mut line = String::new();
                    let status = match reader.read_line(&mut line) {
                        Ok(n) if n > 0 => line.split(' ').nth(1).unwrap_or("?").to_string(),
                        _ => "no answer".to_string(),
                    };
                    let who = if token == Some(MALLORY) {
                        "token"
                    } else {
                        "anonymous"
                    };
                    *statuses.entry(format!("{who} {status}")).or_default() += 1;
                    if status == "200" {
                        held.lock().unwrap().push(reader);
                    }
                }
                statuses
            })
        })
        .collect();

    // Idle sockets from many addresses, beyond the cap and the server's open-file limit.
    let mut idle: Vec<TcpStream> = Vec::new();
    for n in 0..IDLE_SOCKETS {
        if Instant::now() >= deadline {
            break;
        }
        let from = Ipv4Addr::new(127, 1, 0, (n % IDLE_ADDRESSES + 1) as u8);
        if let Ok(stream) = connect_from(from.into(), socket) {
            idle.push(stream);
        }
    }

    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for attempt in attempts {
        for (status, count) in attempt.join().unwrap() {
            *statuses.entry(status).or_default() += count;
        }
    }
    let still_slow = slow.join().unwrap();
    // The idle sockets are closed by the server (shed, or after the header timeout).
    let closing_deadline = Instant::now() + EXCHANGE_TIMEOUT;
    let idle_open = idle
        .iter_mut()
        .map(|stream| closed_by_server(stream, closing_deadline))
        .filter(|closed| !closed)
        .count();
    // One more round while the held streams are still open, then stop the client.
    std::thread::sleep(Duration::from_millis(500));
    let (served, failures) = client.finish();
    eprintln!(
        "served {served}; stream attempts {statuses:?}; idle sockets {}",
        idle.len()
    );

    // A fresh connection has sent nothing yet when it is accepted: at the cap, it is as idle
    // and unauthenticated as the flood's, and may rarely be the one shed (a reset before any
    // answer, which a client retries). Starving is anything else, or more than one in a
    // hundred: a kept-alive connection that has shown its token is never shed.
    let (shed_fresh, failed): (Vec<&String>, Vec<&String>) = failures.iter().partition(|f| {
        !f.starts_with("kept-alive") && f.contains("read: ") && f.contains("reset by peer")
    });
    assert!(
        failed.is_empty() && shed_fresh.len() * 100 <= served,
        "the client with a token failed {} times ({served} served), e.g. {:?}\nstream attempts: \
         {statuses:?}\nserver:\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        server.stderr()
    );
    assert!(served >= 10, "only {served} requests were served");
    assert_eq!(
        idle.len(),
        IDLE_SOCKETS,
        "the flood did not connect in time"
    );
    assert!(!statuses.contains_key("out of time"), "{statuses:?}");
    assert_eq!(still_slow, 0, "slow-header clients were not closed");
    assert_eq!(idle_open, 0, "idle sockets were not closed");
    // The valid token holds its stream cap and no more; every other attempt of it is 429.
    let held = held_streams.lock().unwrap().len();
    assert_eq!(held, STREAMS_PER_TOKEN, "{statuses:?}");
    assert_eq!(statuses.get("token 200"), Some(&STREAMS_PER_TOKEN));
    assert!(
        statuses.get("token 429").is_some_and(|n| *n > 1000),
        "{statuses:?}"
    );
    // Anonymous attempts are refused (401, then 429 once the address is throttled).
    assert!(
        statuses
            .keys()
            .filter(|k| k.starts_with("anonymous"))
            .all(|k| k == "anonymous 401" || k == "anonymous 429" || k == "anonymous no answer"),
        "{statuses:?}"
    );
    assert!(statuses.contains_key("anonymous 429"), "{statuses:?}");
    drop(held_streams);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_flood_from_one_address_does_not_shed_new_connections_of_a_client_with_a_token() {
    // A cap of 64 connections (a share of 8 per address); the flood opens far more, from
    // 127.0.0.1, and never sends a byte. Before the per-address share, at the cap the oldest
    // anonymous connections were shed whatever their address: the client's connection was
    // among them for as long as its head was not read, and none of its requests got through.
    const CAP: usize = 64;
    const FLOOD_THREADS: usize = 2;
    const HELD_PER_THREAD: usize = 500;
    const REQUESTS: usize = 50;
    const HEAD_DELAY: Duration = Duration::from_millis(200);
    raise_own_open_files(8192);
    let warden = Warden::faux();
    write_config(
        &warden,
        &format!(
            "[serve]\nworkers = 1\nmax_connections = {CAP}\nheader_timeout_secs = 30\n\
             rate_limit_per_minute = 1000000\nrate_limit_burst = 100000\n"
        ),
    );
    let server = Server::start(&warden, TOKENS);
    let addr = server.addr().to_string();
    let socket: SocketAddr = addr.parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..FLOOD_THREADS)
        .map(|_| {
            let (stop, opened) = (Arc::clone(&stop), Arc::clone(&opened));
            std::thread::spawn(move || {
                // The last sockets stay open on this side: the server is the one closing them.
                let mut held = std::collections::VecDeque::new();
                while !stop.load(Ordering::Acquire) {
                    // A short timeout: a SYN the full accept queue dropped is sent again at
                    // once on a new socket rather than a second later.
                    let Ok(stream) = TcpStream::connect_timeout(&socket, Duration::from_millis(50))
                    else {
                        continue;
                    };
                    held.push_back(stream);
                    if held.len() > HELD_PER_THREAD {
                        held.pop_front();
                    }
                    opened.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
        .collect();
    // The client starts once the flood has opened more than the cap.
    let deadline = Instant::now() + Duration::from_secs(120);
    while opened.load(Ordering::Acquire) < 2 * CAP && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // A client with a token, a new connection per request, sending its request a moment after
    // the connect (a slow link, a connection opened ahead of its request): each connection is
    // anonymous until its head has been read.
    let bearer = format!("Bearer {ADMIN}");
    let mut failures = Vec::new();
    for _ in 0..REQUESTS {
        let result = connect_from(CLIENT_ADDRESS, socket)
            .map_err(|e| format!("connect: {e}"))
            .and_then(|stream| {
                std::thread::sleep(HEAD_DELAY);
                exchange_on(
                    stream,
                    &addr,
                    "GET",
                    "/v1/tasks",
                    &[("Authorization", &bearer)],
                )
            });
        match result {
            Ok((200, _)) => {}
            Ok((status, body)) => failures.push(format!("{status} {body}")),
            Err(error) => failures.push(error),
        }
    }
    let during = opened.load(Ordering::Acquire);
    stop.store(true, Ordering::Release);
    for thread in flood {
        thread.join().unwrap();
    }
    eprintln!(
        "{} of {REQUESTS} requests served; the flood opened {during} connections meanwhile",
        REQUESTS - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {REQUESTS} requests of the client with a token failed, e.g. {:?}\nserver:\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        server.stderr()
    );
    assert!(
        during >= 2 * CAP,
        "the flood opened only {during} connections"
    );
    server.log_line("shedding its oldest");
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn running_out_of_descriptors_neither_stops_the_listener_nor_a_client_with_a_token() {
    // 40 files: the cap is the minimum (16 connections, 34 with those being shed), and the
    // store and runtime hold enough descriptors that accept() itself fails with EMFILE.
    let warden = Warden::faux();
    write_config(&warden, "[serve]\nworkers = 1\n");
    let server = Server::start_with_open_files(&warden, TOKENS, 40);
    let addr = server.addr().to_string();
    let socket: SocketAddr = addr.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // From 50 addresses, each within its share of anonymous connections (8).
    let idle: Vec<TcpStream> = (0..300)
        .take_while(|_| Instant::now() < deadline)
        .filter_map(|n: usize| {
            let from = Ipv4Addr::new(127, 1, 0, (n % 50 + 1) as u8);
            connect_from(from.into(), socket).ok()
        })
        .collect();
    let bearer = format!("Bearer {ADMIN}");
    for _ in 0..20 {
        let reply = exchange_from(
            CLIENT_ADDRESS,
            &addr,
            "GET",
            "/v1/tasks",
            &[("Authorization", &bearer)],
        );
        assert!(
            matches!(reply, Ok((200, _))),
            "{reply:?}\nserver:\n{}",
            server.stderr()
        );
    }
    server.log_line("cannot accept a connection");
    drop(idle);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn bootstrap_tokens_shorter_than_32_characters_are_refused_at_start_up() {
    let warden = Warden::faux();
    let short: &[Token] = &[("root", "admin", "only-31-characters-long-0123456")];
    let Err((code, stderr)) = Server::try_start(&warden, short) else {
        panic!("warden serve started with a 31-character token");
    };
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("WARDEN_API_TOKENS entry 1 (root)") && stderr.contains("at least 32"),
        "{stderr}"
    );
}

#[test]
fn foreign_hosts_and_origins_are_refused_and_failed_logins_throttled_per_address() {
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    let addr = server.addr().to_string();
    let port = addr.rsplit_once(':').unwrap().1.to_string();
    let bearer = format!("Bearer {ADMIN}");
    let auth = ("Authorization", bearer.as_str());
    let get = |headers: &[(&str, &str)]| exchange(&addr, "GET", "/v1/tasks", headers).unwrap();

    // Host: the address as bound, localhost on loopback; anything else is 421.
    assert_eq!(get(&[auth]).0, 200);
    let localhost = format!("localhost:{port}");
    let request = |host: &str| {
        let stream = TcpStream::connect(&addr).unwrap();
        stream.set_read_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
        (&stream)
            .write_all(
                format!(
                    "GET /v1/tasks HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ADMIN}\r\n\
                     Connection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
        read_one_response(&mut BufReader::new(stream)).unwrap()
    };
    assert_eq!(request(&localhost).0, 200);
    let (status, body) = request(&format!("rebound.example:{port}"));
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("misdirected_request"), "{body}");

    // Origin: state-changing requests from another origin are 403, from our own pass.
    let post =
        |origin: &str| exchange(&addr, "POST", "/v1/tasks", &[auth, ("Origin", origin)]).unwrap();
    let (status, body) = post("https://evil.example");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("cross-origin"), "{body}");
    assert_eq!(post("null").0, 403);
    // Our own origin reaches the handler (which finds the empty body invalid).
    assert_eq!(post(&format!("http://{addr}")).0, 422);
    assert_eq!(
        exchange(&addr, "POST", "/v1/tasks", &[auth]).unwrap().0,
        422
    );

    // Failed authentications from this address: 401, then 429 with Retry-After; the valid
    // token from the same address keeps working.
    let mut throttled = None;
    for attempt in 0..200 {
        let stream = TcpStream::connect(&addr).unwrap();
        stream.set_read_timeout(Some(EXCHANGE_TIMEOUT)).unwrap();
        (&stream)
            .write_all(
                format!(
                    "GET /v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer \
                     guess-{attempt:032}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
        let mut text = String::new();
        BufReader::new(stream).read_to_string(&mut text).unwrap();
        if text.starts_with("HTTP/1.1 429") {
            throttled = Some(text);
            break;
        }
        assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    }
    let throttled = throttled.expect("failed authentications were never throttled");
    assert!(
        throttled.to_ascii_lowercase().contains("retry-after:"),
        "{throttled}"
    );
    assert!(throttled.contains("rate_limited"), "{throttled}");
    assert_eq!(get(&[auth]).0, 200);
    assert_eq!(get(&[]).0, 429);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}
