//! Warden's own egress, for dependency fetching only: an HTTP forward proxy that a change's
//! `prepare` step — and nothing else — reaches through the sandbox's egress relay.
//!
//! **What it admits.** `CONNECT host:port` (TLS passes through unread) and plain-HTTP `GET` and
//! `HEAD` in absolute form (`GET http://host/path`, for registries that serve plain HTTP), to a
//! host on the allow-list: the toolchain presets' registries plus `[egress] allow`. A listed
//! name without a port admits ports 443 and 80. Everything else is answered `403` (a host not
//! listed, an IP literal, a name that resolves only to non-public addresses) or `405` (another
//! method), and recorded.
//!
//! **Where it connects.** It resolves a name itself and connects only to public addresses (the
//! callbacks' rules, [`crate::address::is_public`]: no loopback, private, link-local,
//! CGNAT, mapped or documentation address), so a listed name that resolves to `127.0.0.1` or a
//! cloud metadata address reaches nothing. `[egress] allow_private` names the operator's own
//! hosts (a registry mirror on the LAN) that may resolve anywhere, IP literals included. With
//! `[egress] upstream` it decides the same way and lets the operator's proxy connect: `CONNECT`
//! is passed on as `CONNECT`, a `GET` in absolute form. It carries no credentials: proxy
//! authorisation headers are dropped, nothing is added.
//!
//! **Bounds.** One proxy serves one prepare command and stops with it (every connection is
//! closed then); it listens on `127.0.0.1` only while that command runs. Bytes relayed across
//! all its connections are capped (`[egress] max_mib`), a connection idle for a minute is
//! closed, at most [`MAX_CONNECTIONS`] are served at once, and a request head is at most
//! [`MAX_HEAD`] bytes. Every connection, admitted or refused, is an [`EgressRecord`]: host,
//! port, bytes each way, duration, verdict.
//!
//! A redirect needs no rule of its own: the client follows it with a new request through the
//! proxy, which checks the new host like any other.

/// The words of a refusal of a host that resolves only to addresses the proxy refuses.
pub const NO_PUBLIC_ADDRESS: &str = "resolves to no public address";

use crate::address::is_public;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ports a listed host is admitted on when its entry names none.
const DEFAULT_PORTS: [u16; 2] = [443, 80];
/// The largest request head read (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Connections served at once; more are answered `503`.
pub const MAX_CONNECTIONS: usize = 32;
/// How long connecting to a registry (or the upstream proxy) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A connection with no byte in either direction for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes relayed by one prepare command's proxy, by default (4 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

/// One allow-list entry: a host name (`registry.npmjs.org`), or every name under a domain
/// (`*.crates.io`, not `crates.io` itself), with an optional port. Names are lowercase
/// without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// The name, or the domain after `*.`.
    host: String,
    /// `*.` entries: names under `host`.
    suffix: bool,
    /// The only port admitted; `None`: 443 and 80.
    port: Option<u16>,
}

impl HostRule {
    /// Parses `host`, `*.domain`, `host:port` or `[v6]:port`; IP literals only when
    /// `literals` (the operator's private entries).
    pub fn parse(raw: &str, literals: bool) -> Result<HostRule, String> {
        let refused = |why: &str| Err(format!("egress host {raw:?}: {why}"));
        let (suffix, rest) = match raw.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, raw),
        };
        let authority = match crate::authority::parse_authority(rest) {
            Some(authority) if raw.trim() == raw && !rest.is_empty() => authority,
            _ => return refused("expected a host name, *.domain or host:port (no scheme or path)"),
        };
        if authority.port == Some(0) {
            return refused("port 0");
        }
        let host = authority.host;
        if literal_ip(&host).is_some() {
            if suffix || !literals {
                return refused(
                    "an IP address is admitted only under [egress] allow_private, the operator's \
                     own hosts",
                );
            }
        } else if !valid_name(&host) || (suffix && !host.contains('.')) {
            return refused("not a valid host name");
        }
        Ok(HostRule {
            host,
            suffix,
            port: authority.port,
        })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let name = if self.suffix {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
        } else {
            host == self.host
        };
        name && match self.port {
            Some(only) => only == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let star = if self.suffix { "*." } else { "" };
        let host = &self.host;
        match self.port {
            Some(port) => write!(f, "{star}{host}:{port}"),
            None => write!(f, "{star}{host}"),
        }
    }
}

/// A host name: letters, digits, `-` and `.`, no empty label, at most 253 characters.
fn valid_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// `host` as an IP address, brackets of an IPv6 literal removed.
fn literal_ip(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// What the proxy admits, resolved from the presets and `[egress]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSettings {
    /// Hosts reached at public addresses only.
    pub allow: Vec<HostRule>,
    /// The operator's own hosts: any address, IP literals included.
    pub allow_private: Vec<HostRule>,
    /// The operator's HTTP proxy (`host:port`) that connects on Warden's behalf.
    pub upstream: Option<String>,
    /// Bytes one prepare command's proxy relays, both ways together.
    pub max_bytes: u64,
}

impl Default for EgressSettings {
    fn default() -> EgressSettings {
        EgressSettings {
            allow: Vec::new(),
            allow_private: Vec::new(),
            upstream: None,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

impl EgressSettings {
    /// Whether anything is admitted at all: nothing listed means no network.
    pub fn admits_anything(&self) -> bool {
        !self.allow.is_empty() || !self.allow_private.is_empty()
    }

    /// Adds `rule` unless an equal one is listed.
    pub fn add(&mut self, rule: HostRule) {
        if !self.allow.contains(&rule) {
            self.allow.push(rule);
        }
    }

    /// The allow-list as people read it (`warden doctor`, the docs).
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.allow.iter().map(HostRule::to_string).collect();
        parts.extend(
            self.allow_private
                .iter()
                .map(|rule| format!("{rule} (private)")),
        );
        if parts.is_empty() {
            return "nothing (prepare has no network)".into();
        }
        let mut text = parts.join(", ");
        if let Some(upstream) = &self.upstream {
            text.push_str(&format!("; through the upstream proxy {upstream}"));
        }
        text
    }

    /// The first listed host that names a concrete name, with the port it is reached on: what
    /// `warden doctor` tries.
    pub fn probe_target(&self) -> Option<(String, u16)> {
        self.allow
            .iter()
            .chain(&self.allow_private)
            .find(|rule| !rule.suffix)
            .map(|rule| (rule.host.clone(), rule.port.unwrap_or(DEFAULT_PORTS[0])))
    }
}

/// Name resolution: the system resolver in production, a table in tests.
pub type Resolver = Arc<dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync>;

/// The system resolver (`getaddrinfo`).
fn system_resolver() -> Resolver {
    Arc::new(|host, port| Ok((host, port).to_socket_addrs()?.collect()))
}

/// Where an admitted connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Straight to these addresses (each checked), in turn.
    Direct(Vec<SocketAddr>),
    /// Through the operator's proxy.
    Upstream(String),
}

/// The allow-list with a resolver: decides each request.
#[derive(Clone)]
pub struct EgressPolicy {
    settings: EgressSettings,
    resolve: Resolver,
}

impl fmt::Debug for EgressPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressPolicy")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EgressPolicy {
    /// `settings` with the system resolver.
    pub fn new(settings: EgressSettings) -> EgressPolicy {
        EgressPolicy::with_resolver(settings, system_resolver())
    }

    /// `settings` with `resolve` (tests: a name that resolves to a private address).
    pub fn with_resolver(settings: EgressSettings, resolve: Resolver) -> EgressPolicy {
        EgressPolicy { settings, resolve }
    }

    pub fn settings(&self) -> &EgressSettings {
        &self.settings
    }

    /// Where a connection to `host:port` goes, or why it is refused (a sentence that names
    /// the setting to change).
    pub fn route(&self, host: &str, port: u16) -> Result<Route, String> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let via = |addresses: Vec<SocketAddr>| match &self.settings.upstream {
            Some(upstream) => Route::Upstream(upstream.clone()),
            None => Route::Direct(addresses),
        };
        let private = self
            .settings
            .allow_private
            .iter()
            .any(|rule| rule.matches(&host, port));
        if let Some(ip) = literal_ip(&host) {
            if private {
                return Ok(via(vec![SocketAddr::new(ip, port)]));
            }
            return Err(format!(
                "{host} is an IP address; only host names on the allow-list are reached (the \
                 operator's own hosts go under [egress] allow_private)"
            ));
        }
        if !valid_name(&host) {
            return Err(format!("{host:?} is not a valid host name"));
        }
        let public = self
            .settings
            .allow
            .iter()
            .any(|rule| rule.matches(&host, port));
        if !private && !public {
            return Err(format!(
                "{host}:{port} is not on the egress allow-list (add it to [egress] allow in \
                 warden.toml)"
            ));
        }
        if self.settings.upstream.is_some() {
            // The operator's proxy resolves and connects; Warden has decided.
            return Ok(via(Vec::new()));
        }
        let found = (self.resolve)(&host, port)
            .map_err(|error| format!("{host} could not be resolved: {error}"))?;
        if private {
            return match found.is_empty() {
                true => Err(format!("{host} resolves to no address")),
                false => Ok(Route::Direct(found)),
            };
        }
        let (admitted, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = found
            .into_iter()
            .partition(|address| is_public(address.ip()));
        if admitted.is_empty() {
            let refused: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
            return Err(format!(
                "{host} {NO_PUBLIC_ADDRESS} (refused: {})",
                if refused.is_empty() {
                    "none found".into()
                } else {
                    refused.join(", ")
                }
            ));
        }
        Ok(Route::Direct(admitted))
    }

    /// Routes and connects to `host:port` as a `CONNECT` would (through the upstream's own
    /// `CONNECT` when there is one), then closes: `warden doctor`'s check.
    pub fn probe(&self, host: &str, port: u16) -> Result<String, String> {
        let route = self.route(host, port)?;
        let (mut stream, described) = open(&route, host, port).map_err(|e| e.to_string())?;
        if let Route::Upstream(_) = route {
            let status = upstream_connect(&mut stream, host, port)
                .map_err(|e| format!("the upstream proxy: {e}"))?;
            if status.code != 200 {
                return Err(format!(
                    "the upstream proxy answered CONNECT {host}:{port} with {}",
                    status.code
                ));
            }
        }
        let _ = stream.shutdown(Shutdown::Both);
        Ok(described)
    }
}

/// Connects along `route`; returns the stream and where it went, for messages.
fn open(route: &Route, host: &str, port: u16) -> io::Result<(TcpStream, String)> {
    match route {
        Route::Direct(addresses) => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
            for address in addresses {
                match TcpStream::connect_timeout(address, CONNECT_TIMEOUT) {
                    Ok(stream) => return Ok((stream, format!("{host}:{port} at {address}"))),
                    Err(error) => last = error,
                }
            }
            Err(io::Error::new(
                last.kind(),
                format!("connecting to {host}:{port}: {last}"),
            ))
        }
        Route::Upstream(upstream) => {
            let mut last = io::Error::new(
                io::ErrorKind::NotFound,
                "the upstream proxy resolves to no address",
            );
            for address in upstream.to_socket_addrs()? {
                match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                    Ok(stream) => return Ok((stream, format!("{host}:{port} through {upstream}"))),
                    Err(error) => last = error,
                }
            }
            Err(io::Error::new(
                last.kind(),
                format!("connecting to the upstream proxy {upstream}: {last}"),
            ))
        }
    }
}

/// One connection the proxy served or refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord {
    /// `CONNECT`, `GET`, `HEAD`, or what was asked (refused).
    pub method: String,
    /// The host asked for (empty when the request could not be read).
    pub host: String,
    pub port: u16,
    /// Whether the allow-list admitted it.
    pub allowed: bool,
    /// Why it was refused, or how an admitted one failed or was cut.
    pub reason: Option<String>,
    /// Bytes from the sandbox to the registry.
    pub bytes_sent: u64,
    /// Bytes from the registry to the sandbox.
    pub bytes_received: u64,
    pub duration: Duration,
}

impl EgressRecord {
    /// The task event that reports this connection.
    pub fn event(&self) -> warden_protocol::Event {
        warden_protocol::Event::EgressConnection {
            method: self.method.clone(),
            host: self.host.clone(),
            port: self.port,
            allowed: self.allowed,
            reason: self.reason.clone(),
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// A running proxy on `127.0.0.1`; [`EgressProxy::stop`] (or dropping it) ends it and every
/// connection.
pub struct EgressProxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    policy: EgressPolicy,
    stopped: AtomicBool,
    /// Bytes relayed so far, both ways, all connections.
    used: AtomicU64,
    active: AtomicUsize,
    records: Mutex<Vec<EgressRecord>>,
    /// Copies of the client sockets, shut down at stop: `(id, socket)`.
    live: Mutex<Vec<(u64, TcpStream)>>,
}

impl EgressProxy {
    /// Listens on an ephemeral port of `127.0.0.1` and serves under `policy`.
    pub fn start(policy: EgressPolicy) -> io::Result<EgressProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            policy,
            stopped: AtomicBool::new(false),
            used: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            records: Mutex::new(Vec::new()),
            live: Mutex::new(Vec::new()),
        });
        let thread = std::thread::Builder::new()
            .name("warden-egress-proxy".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&listener, &shared)
            })?;
        Ok(EgressProxy {
            address,
            shared,
            thread: Some(thread),
        })
    }

    /// `127.0.0.1:port`, as the sandbox's relay dials it.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// Stops accepting, closes every connection, waits briefly for their records, and returns
    /// every record in the order the connections ended.
    pub fn stop(&mut self) -> Vec<EgressRecord> {
        if !self.shared.stopped.swap(true, Ordering::SeqCst) {
            // Wake the blocking accept.
            let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let live = std::mem::take(&mut *lock(&self.shared.live));
        for (_, socket) in live {
            let _ = socket.shutdown(Shutdown::Both);
        }
        // Connection threads end once their sockets are shut; their records follow.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.shared.active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::mem::take(&mut *lock(&self.shared.records))
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut client) = client else { continue };
        if shared.active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            let _ = respond(
                &mut client,
                503,
                "too many connections through Warden's egress",
            );
            continue;
        }
        next_id += 1;
        let id = next_id;
        if let Ok(copy) = client.try_clone() {
            lock(&shared.live).push((id, copy));
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("warden-egress-conn".into())
            .spawn({
                let shared = Arc::clone(shared);
                move || {
                    let record = serve(client, &shared);
                    lock(&shared.records).push(record);
                    lock(&shared.live).retain(|(live, _)| *live != id);
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            lock(&shared.live).retain(|(live, _)| *live != id);
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A request head: the request line's parts and the header lines.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, String)>,
}

/// Reads up to the blank line ending the head; returns it and whatever followed.
fn read_head(stream: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let end = find(&buffer, b"\r\n\r\n");
        if end.map_or(buffer.len(), |end| end + 4) > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the request head is longer than {MAX_HEAD} bytes"),
            ));
        }
        if let Some(end) = end {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before a request",
            ));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn parse_head(bytes: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines.filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.is_empty() || name.contains(' ') {
            return None;
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Some(Head {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
    })
}

/// `host:port` of a `CONNECT` target (a port is required).
fn split_authority(authority: &str) -> Option<(String, u16)> {
    let parsed = crate::authority::parse_authority(authority)?;
    Some((parsed.host, parsed.port.filter(|port| *port != 0)?))
}

/// The host, port and origin-form path of an absolute `http://` target.
fn split_absolute(target: &str) -> Option<(String, u16, String)> {
    let rest = target.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return None;
    }
    let parsed = crate::authority::parse_authority(authority)?;
    let port = parsed.port.unwrap_or(80);
    (port != 0).then(|| (parsed.host, port, path.to_string()))
}

fn respond(stream: &mut TcpStream, code: u16, message: &str) -> io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("warden egress: {message}\n");
    let answer = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(answer.as_bytes())?;
    stream.flush()
}

/// Serves one client connection; returns its record.
fn serve(mut client: TcpStream, shared: &Shared) -> EgressRecord {
    let started = Instant::now();
    let mut record = EgressRecord {
        method: String::new(),
        host: String::new(),
        port: 0,
        allowed: false,
        reason: None,
        bytes_sent: 0,
        bytes_received: 0,
        duration: Duration::ZERO,
    };
    let finish = |mut record: EgressRecord| {
        record.duration = started.elapsed();
        record
    };
    let _ = client.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = client.set_write_timeout(Some(IDLE_TIMEOUT));
    let (head, leftover) = match read_head(&mut client) {
        Ok(read) => read,
        Err(error) => {
            let _ = respond(&mut client, 400, &error.to_string());
            record.reason = Some(format!("no request: {error}"));
            return finish(record);
        }
    };
    let Some(head) = parse_head(&head) else {
        let _ = respond(&mut client, 400, "not an HTTP/1 request");
        record.reason = Some("not an HTTP/1 request".into());
        return finish(record);
    };
    record.method = head.method.chars().take(16).collect();
    let target = match head.method.as_str() {
        "CONNECT" => split_authority(&head.target).map(|(host, port)| (host, port, None)),
        "GET" | "HEAD" => {
            split_absolute(&head.target).map(|(host, port, path)| (host, port, Some(path)))
        }
        _ => {
            let message = format!(
                "{} is not admitted: only CONNECT, and GET or HEAD of http:// URLs, reach \
                 registries",
                record.method
            );
            let _ = respond(&mut client, 405, &message);
            record.reason = Some(message);
            return finish(record);
        }
    };
    let Some((host, port, path)) = target else {
        let message = format!("cannot read the target {:?}", truncate(&head.target, 200));
        let _ = respond(&mut client, 400, &message);
        record.reason = Some(message);
        return finish(record);
    };
    record.host = host.trim_end_matches('.').to_ascii_lowercase();
    record.port = port;
    let route = match shared.policy.route(&host, port) {
        Ok(route) => route,
        Err(reason) => {
            let _ = respond(&mut client, 403, &reason);
            record.reason = Some(reason);
            return finish(record);
        }
    };
    record.allowed = true;
    let (mut upstream, _) = match open(&route, &record.host, port) {
        Ok(opened) => opened,
        Err(error) => {
            let _ = respond(&mut client, 502, &error.to_string());
            record.reason = Some(error.to_string());
            return finish(record);
        }
    };
    let _ = upstream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = upstream.set_write_timeout(Some(IDLE_TIMEOUT));
    let through_upstream = matches!(route, Route::Upstream(_));
    let counters = Counters::new(started);
    let outcome = match path {
        None => {
            // CONNECT: a tunnel, bytes both ways, unread.
            let opened = if through_upstream {
                upstream_connect(&mut upstream, &record.host, port).and_then(|status| {
                    if status.code == 200 {
                        Ok(status.after)
                    } else {
                        Err(io::Error::other(format!(
                            "the upstream proxy answered CONNECT with {}",
                            status.code
                        )))
                    }
                })
            } else {
                Ok(Vec::new())
            };
            match opened {
                Ok(after) => client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .and_then(|()| upstream.write_all(&leftover))
                    .and_then(|()| client.write_all(&after))
                    .and_then(|()| {
                        counters
                            .sent
                            .fetch_add(leftover.len() as u64, Ordering::SeqCst);
                        counters
                            .received
                            .fetch_add(after.len() as u64, Ordering::SeqCst);
                        tunnel(&client, &upstream, shared, &counters)
                    }),
                Err(error) => {
                    let _ = respond(&mut client, 502, &error.to_string());
                    Err(error)
                }
            }
        }
        Some(path) => {
            // GET or HEAD: one request, forwarded with Connection: close, the response relayed
            // to its end. Nothing else the client sends is read.
            let line_target = if through_upstream {
                head.target.as_str()
            } else {
                path.as_str()
            };
            let request = forwarded_request(&head, line_target, &record.host, port);
            counters
                .sent
                .fetch_add(request.len() as u64, Ordering::SeqCst);
            upstream.write_all(&request).and_then(|()| {
                relay_response(
                    &mut upstream,
                    &mut client,
                    head.method == "HEAD",
                    shared,
                    &counters,
                )
            })
        }
    };
    if let Err(error) = outcome {
        record.reason = Some(if shared.stopped.load(Ordering::SeqCst) {
            format!("closed when the prepare command ended ({error})")
        } else {
            error.to_string()
        });
    }
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    record.bytes_sent = counters.sent.load(Ordering::SeqCst);
    record.bytes_received = counters.received.load(Ordering::SeqCst);
    finish(record)
}

fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The request sent on: the request line with `target`, the client's headers without the
/// hop-by-hop and proxy ones, `Host` when missing, and `Connection: close`.
fn forwarded_request(head: &Head, target: &str, host: &str, port: u16) -> Vec<u8> {
    let named_by_connection: Vec<String> = head
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| value.split(',').map(|v| v.trim().to_ascii_lowercase()))
        .collect();
    let dropped = |name: &str| {
        let lower = name.to_ascii_lowercase();
        matches!(
            lower.as_str(),
            "connection"
                | "proxy-connection"
                | "proxy-authorization"
                | "proxy-authenticate"
                | "keep-alive"
                | "te"
                | "trailer"
                | "transfer-encoding"
                | "upgrade"
        ) || named_by_connection.contains(&lower)
    };
    let mut out = format!("{} {target} {}\r\n", head.method, head.version);
    let mut has_host = false;
    for (name, value) in &head.headers {
        if dropped(name) {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !has_host {
        match port {
            80 => out.push_str(&format!("Host: {host}\r\n")),
            _ => out.push_str(&format!("Host: {host}:{port}\r\n")),
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// Relays one response from `origin` to `client`: its head with `Connection: close` (the
/// client opens a new connection, checked again, for its next request), then its body as its
/// framing says (`Content-Length`, chunked, none for `HEAD`, 1xx, 204 and 304, else to the end
/// of the connection), so a server that keeps the connection alive does not hold it open.
fn relay_response(
    origin: &mut TcpStream,
    client: &mut TcpStream,
    head_request: bool,
    shared: &Shared,
    counters: &Counters,
) -> io::Result<()> {
    let (head, mut buffered) = read_head(origin)?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default().to_string();
    let code: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::other("the registry's answer is not HTTP"))?;
    let mut length = None;
    let mut chunked = false;
    let mut out = format!("{status_line}\r\n");
    for line in lines.filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<u64>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("keep-alive")
            || name.eq_ignore_ascii_case("proxy-connection")
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let send = |bytes: &[u8], client: &mut TcpStream| -> io::Result<()> {
        let before = shared.used.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        if before.saturating_add(bytes.len() as u64) > shared.policy.settings.max_bytes {
            return Err(io::Error::other(format!(
                "the egress byte limit of {} MiB was reached ([egress] max_mib)",
                shared.policy.settings.max_bytes >> 20
            )));
        }
        client.write_all(bytes)?;
        counters.touch();
        counters
            .received
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
        Ok(())
    };
    send(out.as_bytes(), client)?;
    let bodiless = head_request || (100..200).contains(&code) || code == 204 || code == 304;
    if bodiless {
        return Ok(());
    }
    let mut reader = BodyReader {
        origin,
        buffered: std::mem::take(&mut buffered),
        counters,
    };
    if chunked {
        loop {
            let line = reader.line()?;
            send(&line, client)?;
            let size_text = String::from_utf8_lossy(&line);
            let size_text = size_text
                .trim()
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let size = u64::from_str_radix(&size_text, 16)
                .map_err(|_| io::Error::other("a malformed chunk size from the registry"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let trailer = reader.line()?;
                    send(&trailer, client)?;
                    if trailer == b"\r\n" {
                        return Ok(());
                    }
                }
            }
            // The chunk and its CRLF.
            reader.copy(size + 2, &mut |bytes| send(bytes, client))?;
        }
    }
    match length {
        Some(length) => reader.copy(length, &mut |bytes| send(bytes, client)),
        None => reader.copy(u64::MAX, &mut |bytes| send(bytes, client)),
    }
}

/// A response body read from `origin` after bytes already buffered with its head.
struct BodyReader<'a> {
    origin: &'a mut TcpStream,
    buffered: Vec<u8>,
    counters: &'a Counters,
}

impl BodyReader<'_> {
    /// Fills the buffer with at least one more byte; `false` at the end of the connection.
    fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.origin.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(read) => {
                    self.buffered.extend_from_slice(&chunk[..read]);
                    return Ok(true);
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && !self.counters.idle() => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// One line, CRLF included (at most [`MAX_HEAD`] bytes).
    fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = find(&self.buffered, b"\r\n") {
                let rest = self.buffered.split_off(end + 2);
                return Ok(std::mem::replace(&mut self.buffered, rest));
            }
            if self.buffered.len() > MAX_HEAD || !self.fill()? {
                return Err(io::Error::other(
                    "a malformed chunked body from the registry",
                ));
            }
        }
    }

    /// Passes `count` bytes (or everything to the end of the connection, for `u64::MAX`) to
    /// `send`.
    fn copy(
        &mut self,
        mut count: u64,
        send: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        while count > 0 {
            if self.buffered.is_empty() && !self.fill()? {
                return match count {
                    u64::MAX => Ok(()),
                    _ => Err(io::Error::other("the registry closed the connection early")),
                };
            }
            let take = usize::try_from(count)
                .unwrap_or(usize::MAX)
                .min(self.buffered.len());
            let rest = self.buffered.split_off(take);
            let bytes = std::mem::replace(&mut self.buffered, rest);
            send(&bytes)?;
            if count != u64::MAX {
                count -= take as u64;
            }
        }
        Ok(())
    }
}

/// The status of an upstream proxy's answer to `CONNECT`, and bytes that followed its head.
struct UpstreamStatus {
    code: u16,
    after: Vec<u8>,
}

/// Asks the upstream proxy for a tunnel to `host:port`.
fn upstream_connect(upstream: &mut TcpStream, host: &str, port: u16) -> io::Result<UpstreamStatus> {
    // An IPv6 literal is bracketed already.
    let authority = format!("{host}:{port}");
    // One write: a proxy that answers after the request line must not see the rest arrive
    // after it closed.
    upstream.write_all(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
    )?;
    upstream.flush()?;
    let (head, after) = read_head(upstream)?;
    let text = String::from_utf8_lossy(&head);
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::other("the upstream proxy's answer is not HTTP"))?;
    Ok(UpstreamStatus { code, after })
}

/// Bytes each way and the last moment either way moved, shared by a connection's pumps.
struct Counters {
    started: Instant,
    sent: AtomicU64,
    received: AtomicU64,
    /// Milliseconds since `started` of the last byte either way.
    last_activity_ms: AtomicU64,
}

impl Counters {
    fn new(started: Instant) -> Counters {
        Counters {
            started,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            last_activity_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity_ms.store(now, Ordering::SeqCst);
    }

    /// Whether neither direction moved for [`IDLE_TIMEOUT`].
    fn idle(&self) -> bool {
        let last = Duration::from_millis(self.last_activity_ms.load(Ordering::SeqCst));
        self.started.elapsed().saturating_sub(last) >= IDLE_TIMEOUT
    }
}

/// A tunnel: client to upstream on a thread of its own, upstream to client here.
fn tunnel(
    client: &TcpStream,
    upstream: &TcpStream,
    shared: &Shared,
    counters: &Counters,
) -> io::Result<()> {
    let (client_reader, upstream_writer) = (client.try_clone()?, upstream.try_clone()?);
    std::thread::scope(|scope| {
        let up = scope.spawn(|| {
            pump(
                &client_reader,
                &upstream_writer,
                shared,
                counters,
                &counters.sent,
            )
        });
        let down = pump(upstream, client, shared, counters, &counters.received);
        let up = up
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the relay thread panicked")));
        down.and(up).map(|_| ())
    })
}

/// Copies `from` into `to` until end of file (then half-closes `to`), counting into `count`
/// and the proxy's byte budget. A read timeout while the other direction moves is not idle.
fn pump(
    mut from: &TcpStream,
    mut to: &TcpStream,
    shared: &Shared,
    counters: &Counters,
    count: &AtomicU64,
) -> io::Result<u64> {
    let limit = shared.policy.settings.max_bytes;
    let mut buffer = vec![0u8; 16 * 1024];
    let mut total = 0u64;
    let fail = |error: io::Error| {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        Err(error)
    };
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return Ok(total);
            }
            Ok(read) => read,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if counters.idle() {
                    return fail(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("idle for {} s", IDLE_TIMEOUT.as_secs()),
                    ));
                }
                continue;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return fail(error),
        };
        let before = shared.used.fetch_add(read as u64, Ordering::SeqCst);
        if before.saturating_add(read as u64) > limit {
            return fail(io::Error::other(format!(
                "the egress byte limit of {} MiB was reached ([egress] max_mib)",
                limit >> 20
            )));
        }
        if let Err(error) = to.write_all(&buffer[..read]) {
            return fail(error);
        }
        counters.touch();
        count.fetch_add(read as u64, Ordering::SeqCst);
        total += read as u64;
    }
}

#[cfg(test)]
mod tests;
