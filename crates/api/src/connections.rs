//! The API's connections: the accept loop of `warden serve` on hyper's HTTP/1.1 server, with
//! the limits that keep callers without a token from starving the server.
//!
//! - **A cap on open connections** ([`ConnectionLimits::max_connections`], from the open-file
//!   limit by [`connection_cap`], keeping headroom for the store, SQLite and its WAL, mirrors,
//!   snapshots and sandbox pipes). At the cap a new connection is still accepted, and the least
//!   valuable open one is closed instead (shed). First the anonymous connections (those that
//!   never presented a valid token), taken from the client address that holds the most of them
//!   (an IPv4 address, an IPv6 /64, as for failed authentications), and within it by class, oldest
//!   first within each: those with no request in flight that never completed one (idle
//!   sockets, slow headers), then those idle after a request, then those with a request in
//!   flight. Only then idle connections of valid tokens, oldest first. A connection with a
//!   valid token's request in flight (an event stream, a long diff) is never shed: when nothing
//!   else is left the new connection is closed at once. So a flood of anonymous sockets only
//!   ever displaces itself, and a client with a token keeps being served, also on a brand-new
//!   connection whose request head (and token) has not been read yet, unless it shares the
//!   flooding address.
//! - **A share of anonymous connections per address** ([`max_anonymous_per_address`]: a
//!   sixteenth of the cap, at least 8). A new connection from an address that already holds
//!   its share of anonymous connections displaces that address's own least valuable anonymous
//!   one (in the order above), however full the table is; while as many of the address's
//!   connections are still closing, its new connections are refused at once instead. So one
//!   address holds at most twice its share of anonymous connections, open or closing: it cannot
//!   fill the table, or put the server under pressure, by itself. Behind a reverse proxy every
//!   connection has the proxy's address; what is closed then is the proxy's oldest idle
//!   anonymous connection, never one of a valid token.
//! - **A header-read timeout** ([`ConnectionLimits::header_timeout`]): a request head must
//!   arrive in full within it, counted from the connect (a new connection) or from its first
//!   byte (a kept-alive one): slow-header clients are closed. Under pressure (more than half
//!   the cap open) a new connection gets a quarter of it, at least a second. A request head
//!   (with its read buffer) is at most [`MAX_HEAD_BYTES`] (431 beyond).
//! - **An idle keep-alive timeout** ([`ConnectionLimits::keep_alive`]): a connection with no
//!   request after its last response is closed.
//! - `accept()` errors (`EMFILE` when the process is out of descriptors) shed one connection and
//!   pause the loop briefly instead of spinning or ending it.
//!
//! Each request carries its [`ClientConnection`] (local and peer address) as an extension, with
//! axum's `ConnectInfo<SocketAddr>`; authentication marks it through
//! [`ClientConnection::mark_authenticated`].

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
pub use warden_service::config::serve::{DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEP_ALIVE};

/// How the API holds its connections (`[serve]` `max_connections`, `header_timeout_secs`,
/// `keep_alive_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most; at the cap the least valuable one is shed.
    pub max_connections: usize,
    /// A request head must be complete this long after the connect or after its first byte.
    pub header_timeout: Duration,
    /// A connection without a request this long after its last response is closed.
    pub keep_alive: Duration,
}

/// How much of a request hyper buffers per connection: bounds a head's size, and the memory
/// a connection that never finishes its head can hold.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 1024,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            keep_alive: DEFAULT_KEEP_ALIVE,
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (at most the kernel's
/// `fs.nr_open`) and returns the soft limit now in effect.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let kernel_max = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    let hard = limit.maximum.unwrap_or(kernel_max).min(kernel_max);
    let current = limit.current.unwrap_or(hard);
    if current >= hard {
        return current;
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: limit.maximum,
        },
    ) {
        Ok(()) => hard,
        Err(error) => {
            tracing::warn!(%error, current, hard, "cannot raise the open-file limit");
            current
        }
    }
}

/// How many API connections a process allowed `open_files` descriptors may hold with
/// `workers` concurrent runs: everything but a reserve of a quarter of the limit, and at least
/// 256 + 64 per run (the store's pool, SQLite and its WAL, mirrors and snapshots being read,
/// sandbox pipes, model connections); never fewer than 16.
pub fn connection_cap(open_files: u64, workers: usize) -> usize {
    let per_run = 64u64.saturating_mul(workers as u64);
    let reserve = (256u64.saturating_add(per_run)).max(open_files / 4);
    let cap = open_files.saturating_sub(reserve).max(16);
    usize::try_from(cap).unwrap_or(usize::MAX)
}

/// How many anonymous connections (that have not presented a valid token) one client address
/// (an IPv4 address, an IPv6 /64) may hold at once under a cap of `max_connections`: a sixteenth of the
/// cap, at least 8. A new connection beyond that displaces the address's own least valuable
/// anonymous connection, or is refused while this many of the address's connections are
/// still closing: one address never holds more than twice this share of the table.
pub fn max_anonymous_per_address(max_connections: usize) -> usize {
    (max_connections / 16).max(8)
}

/// The key a client address counts under, for its share of connections here and for the
/// throttle of failed authentications (`routes::auth`): an IPv4 address (also when mapped into
/// IPv6), an IPv6 /64 (what one host or site gets), or the unknown address (`None`, a request
/// not from a socket).
pub(crate) fn address_key(address: Option<IpAddr>) -> u128 {
    const V4: u128 = 1 << 127;
    match address {
        None => u128::MAX,
        Some(IpAddr::V4(ip)) => V4 | u128::from(u32::from(ip)),
        Some(IpAddr::V6(ip)) => match ip.to_ipv4_mapped() {
            Some(v4) => V4 | u128::from(u32::from(v4)),
            None => (u128::from(ip) & !u128::from(u64::MAX)) & !V4,
        },
    }
}

/// The connection a request arrived on: a request extension set by [`serve_connections`].
#[derive(Clone)]
pub struct ClientConnection {
    /// The address the client connected to (the listen address, made concrete when listening
    /// on `0.0.0.0` or `::`).
    pub local: SocketAddr,
    /// The client's address.
    pub peer: SocketAddr,
    tracker: Arc<Tracker>,
}

impl std::fmt::Debug for ClientConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConnection")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl ClientConnection {
    /// Records that a request on this connection presented a valid token: from now on the
    /// connection is shed last, and never while one of its requests is in flight.
    pub fn mark_authenticated(&self) {
        self.tracker.registry.update(self.tracker.id, |slot| {
            slot.authenticated = true;
        });
    }
}

// --- the table of open connections ---

/// What wakes a connection's task: a new deadline, or being shed.
struct Signal {
    wake: Notify,
    shed: AtomicBool,
    /// Set while the connection waits for a request; its next byte read starts the header
    /// timeout.
    waiting: AtomicBool,
}

struct Slot {
    signal: Arc<Signal>,
    /// The peer's [`address_key`].
    address: u128,
    in_flight: u32,
    served: u64,
    authenticated: bool,
    /// When the connection is closed unless a request head has arrived by then.
    deadline: Option<Instant>,
    /// Its entry in [`Table::anonymous`] or [`Table::authenticated`], if it may be shed.
    key: Option<ShedKey>,
    shed: bool,
}

/// `(class, order, id)`: the lowest is shed first.
type ShedKey = (u8, u64, u64);

/// The class of idle connections of valid tokens; the lower ones are anonymous.
const AUTHENTICATED_IDLE: u8 = 3;

impl Slot {
    /// The shedding class: lower classes go first; `None`: never shed.
    fn class(&self) -> Option<u8> {
        if self.shed {
            return None;
        }
        match (self.authenticated, self.in_flight > 0) {
            (false, false) if self.served == 0 => Some(0),
            (false, false) => Some(1),
            (false, true) => Some(2),
            (true, false) => Some(AUTHENTICATED_IDLE),
            (true, true) => None,
        }
    }
}

#[derive(Default)]
struct Table {
    next_id: u64,
    next_order: u64,
    slots: HashMap<u64, Slot>,
    /// The anonymous connections (all of them may be shed) of each address key, least valuable
    /// first; an address without any has no entry.
    anonymous: HashMap<u128, BTreeSet<ShedKey>>,
    /// The addresses of [`Table::anonymous`], the one to shed from first: the most anonymous
    /// connections, then the least valuable first connection. `(Reverse(count), first, key)`.
    addresses: BTreeSet<(Reverse<usize>, ShedKey, u128)>,
    /// Idle connections of valid tokens, oldest first.
    authenticated: BTreeSet<ShedKey>,
    /// Slots told to close that have not closed yet.
    shedding: usize,
    /// Those of [`Table::shedding`] per address key; an address without any has no entry.
    closing: HashMap<u128, usize>,
    warned_at: Option<Instant>,
    share_warned_at: Option<Instant>,
}

impl Table {
    /// Files the slot `id` under its current class (keeping its place when the class holds).
    fn reindex(&mut self, id: u64) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let class = slot.class();
        if slot.key.map(|key| key.0) == class {
            return;
        }
        let address = slot.address;
        let old = slot.key.take();
        let new = class.map(|class| (class, self.next_order, id));
        slot.key = new;
        if new.is_some() {
            self.next_order += 1;
        }
        if let Some(key) = old {
            self.unfile(address, key);
        }
        if let Some(key) = new {
            self.file(address, key);
        }
    }

    fn file(&mut self, address: u128, key: ShedKey) {
        if key.0 == AUTHENTICATED_IDLE {
            self.authenticated.insert(key);
        } else {
            self.change_anonymous(address, |keys| keys.insert(key));
        }
    }

    fn unfile(&mut self, address: u128, key: ShedKey) {
        if key.0 == AUTHENTICATED_IDLE {
            self.authenticated.remove(&key);
        } else {
            self.change_anonymous(address, |keys| keys.remove(&key));
        }
    }

    /// Changes the anonymous connections of `address`, keeping [`Table::addresses`] in step.
    fn change_anonymous(
        &mut self,
        address: u128,
        change: impl FnOnce(&mut BTreeSet<ShedKey>) -> bool,
    ) {
        let keys = self.anonymous.entry(address).or_default();
        if let Some(&first) = keys.first() {
            self.addresses
                .remove(&(Reverse(keys.len()), first, address));
        }
        change(keys);
        match keys.first() {
            Some(&first) => {
                self.addresses.insert((Reverse(keys.len()), first, address));
            }
            None => {
                self.anonymous.remove(&address);
            }
        }
    }

    /// How many anonymous connections `address` holds (not counting those being shed).
    fn anonymous_of(&self, address: u128) -> usize {
        self.anonymous.get(&address).map_or(0, BTreeSet::len)
    }

    /// Tells the least valuable connection to close; false when none may be shed.
    fn shed_one(&mut self) -> bool {
        let next = match self.addresses.first() {
            Some(&(_, key, _)) => Some(key),
            None => self.authenticated.first().copied(),
        };
        next.is_some_and(|key| self.shed(key.2))
    }

    /// Tells the least valuable anonymous connection of `address` to close; false when it has
    /// none.
    fn shed_anonymous_of(&mut self, address: u128) -> bool {
        let next = self
            .anonymous
            .get(&address)
            .and_then(|keys| keys.first().copied());
        next.is_some_and(|key| self.shed(key.2))
    }

    fn shed(&mut self, id: u64) -> bool {
        let Some(slot) = self.slots.get_mut(&id) else {
            return false;
        };
        let address = slot.address;
        let key = slot.key.take();
        slot.shed = true;
        slot.signal.shed.store(true, Ordering::Release);
        slot.signal.wake.notify_one();
        if let Some(key) = key {
            self.unfile(address, key);
        }
        self.shedding += 1;
        *self.closing.entry(address).or_default() += 1;
        true
    }

    /// A slot that was shed has closed.
    fn closed(&mut self, address: u128) {
        self.shedding = self.shedding.saturating_sub(1);
        if let Some(closing) = self.closing.get_mut(&address) {
            *closing -= 1;
            if *closing == 0 {
                self.closing.remove(&address);
            }
        }
    }
}

struct Registry {
    limits: ConnectionLimits,
    table: Mutex<Table>,
}

/// Whether a new connection may stay.
enum Admission {
    Open(Arc<Tracker>),
    Refuse,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Nothing panics while the lock is held, but a poisoned table is still a valid table.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut Slot)) {
        let mut table = self.lock();
        if let Some(slot) = table.slots.get_mut(&id) {
            change(slot);
            table.reindex(id);
        }
    }

    /// Makes room for a new connection from `peer` if needed (shedding one of the address's own
    /// anonymous connections beyond its share, or the least valuable of all at the cap) and
    /// registers it.
    fn admit(self: &Arc<Self>, now: Instant, peer: IpAddr) -> Admission {
        let cap = self.limits.max_connections.max(1);
        // Shed connections close a moment later; never hold more than this many at once.
        let hard_cap = cap.saturating_add(cap / 8 + 16);
        let address = address_key(Some(peer));
        let mut table = self.lock();
        let open = table.slots.len();
        if open >= hard_cap {
            return Admission::Refuse;
        }
        let share = max_anonymous_per_address(cap);
        if table.anonymous_of(address) >= share {
            // Displacing is not free: the displaced connection closes a moment later. An
            // address with its share still closing has its new connections refused instead,
            // so that it cannot take the table to the hard cap (refusing everyone) by itself.
            if table.closing.get(&address).is_some_and(|n| *n >= share)
                || !table.shed_anonymous_of(address)
            {
                return Admission::Refuse;
            }
            if table
                .share_warned_at
                .is_none_or(|at| now.duration_since(at) > Duration::from_secs(10))
            {
                table.share_warned_at = Some(now);
                tracing::warn!(
                    %peer,
                    max_anonymous_per_address = share,
                    "an address holds its share of connections without a valid token: \
                     shedding its oldest"
                );
            }
        }
        if open - table.shedding >= cap {
            if table
                .warned_at
                .is_none_or(|at| now.duration_since(at) > Duration::from_secs(10))
            {
                table.warned_at = Some(now);
                tracing::warn!(
                    max_connections = cap,
                    "the connection cap is reached: shedding idle and unauthenticated connections"
                );
            }
            if !table.shed_one() {
                return Admission::Refuse;
            }
        }
        let header_timeout = if table.slots.len() - table.shedding > cap / 2 {
            (self.limits.header_timeout / 4).max(Duration::from_secs(1))
        } else {
            self.limits.header_timeout
        };
        let id = table.next_id;
        table.next_id += 1;
        let signal = Arc::new(Signal {
            wake: Notify::new(),
            shed: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
        });
        table.slots.insert(
            id,
            Slot {
                signal: Arc::clone(&signal),
                address,
                in_flight: 0,
                served: 0,
                authenticated: false,
                deadline: Some(now + header_timeout),
                key: None,
                shed: false,
            },
        );
        table.reindex(id);
        Admission::Open(Arc::new(Tracker {
            id,
            registry: Arc::clone(self),
            signal,
        }))
    }
}

/// One connection's handle on the table; removes its slot when dropped.
struct Tracker {
    id: u64,
    registry: Arc<Registry>,
    signal: Arc<Signal>,
}

impl Tracker {
    fn deadline(&self) -> Option<Instant> {
        self.registry
            .lock()
            .slots
            .get(&self.id)
            .and_then(|slot| slot.deadline)
    }

    fn request_started(&self) {
        self.signal.waiting.store(false, Ordering::Release);
        self.registry.update(self.id, |slot| {
            slot.in_flight += 1;
            slot.deadline = None;
        });
    }

    fn request_finished(&self) {
        let keep_alive = self.registry.limits.keep_alive;
        let mut idle = false;
        self.registry.update(self.id, |slot| {
            slot.in_flight = slot.in_flight.saturating_sub(1);
            slot.served += 1;
            if slot.in_flight == 0 {
                slot.deadline = Some(Instant::now() + keep_alive);
                idle = true;
            }
        });
        if idle {
            self.signal.waiting.store(true, Ordering::Release);
            self.signal.wake.notify_one();
        }
    }

    /// The first byte of a request head arrived on a connection that waited for one.
    fn head_started(&self) {
        let header_timeout = self.registry.limits.header_timeout;
        self.registry.update(self.id, |slot| {
            if slot.in_flight == 0 {
                slot.deadline = Some(Instant::now() + header_timeout);
            }
        });
        self.signal.wake.notify_one();
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let mut table = self.registry.lock();
        if let Some(slot) = table.slots.remove(&self.id) {
            if let Some(key) = slot.key {
                table.unfile(slot.address, key);
            }
            if slot.shed {
                table.closed(slot.address);
            }
        }
    }
}

/// Ends the request it belongs to when the response body is done (or dropped).
struct RequestGuard(Arc<Tracker>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that ends its request when hyper is done with it.
struct TrackedBody {
    body: Body,
    _guard: RequestGuard,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noticing the first byte of each request head.
struct TrackedStream {
    stream: TcpStream,
    tracker: Arc<Tracker>,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && this.tracker.signal.waiting.swap(false, Ordering::AcqRel)
        {
            this.tracker.head_started();
        }
        result
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

// --- the loops ---

/// Serves `router` on `listener` within `limits` until `shutdown` resolves; then stops
/// accepting, lets every connection finish its request in flight (open event streams must be
/// ended by the caller) and returns once all are closed.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let fallback_local = listener.local_addr()?;
    let registry = Arc::new(Registry {
        limits,
        table: Mutex::default(),
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(true).max_buf_size(MAX_HEAD_BYTES);
    let http = Arc::new(http);
    let (stop, stopped) = watch::channel(false);
    // Every connection task holds a sender; all are gone once the last connection closed.
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut accept_error_logged: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                on_accept_error(&error, &registry, &mut accept_error_logged).await;
                continue;
            }
        };
        let tracker = match registry.admit(Instant::now(), peer.ip()) {
            Admission::Open(tracker) => tracker,
            Admission::Refuse => {
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().unwrap_or(fallback_local);
        let connection = ClientConnection {
            local,
            peer,
            tracker,
        };
        tokio::spawn(serve_connection(
            stream,
            connection,
            router.clone(),
            Arc::clone(&http),
            stopped.clone(),
            alive.clone(),
        ));
    }
    drop(listener);
    let _ = stop.send(true);
    drop(alive);
    let _ = all_closed.recv().await;
    Ok(())
}

/// Connection errors of one client are not the listener's; out of descriptors (or memory),
/// the loop sheds a connection and pauses instead of spinning on the same error.
async fn on_accept_error(error: &io::Error, registry: &Registry, logged_at: &mut Option<Instant>) {
    use io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionRefused
            | ErrorKind::Interrupted
    ) {
        return;
    }
    let now = Instant::now();
    if logged_at.is_none_or(|at| now.duration_since(at) > Duration::from_secs(10)) {
        *logged_at = Some(now);
        tracing::warn!(%error, "cannot accept a connection; shedding one and retrying");
    }
    registry.lock().shed_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn serve_connection(
    stream: TcpStream,
    connection: ClientConnection,
    router: Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    mut stopped: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
) {
    let tracker = Arc::clone(&connection.tracker);
    let io = TokioIo::new(TrackedStream {
        stream,
        tracker: Arc::clone(&tracker),
    });
    let routes = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        connection.tracker.request_started();
        let guard = RequestGuard(Arc::clone(&connection.tracker));
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(connection.peer));
        request.extensions_mut().insert(connection.clone());
        let response = routes.call(request);
        async move {
            let response = response.await?;
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(TrackedBody {
                    body,
                    _guard: guard,
                })
            }))
        }
    });
    let conn = http.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut draining = *stopped.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        if tracker.signal.shed.load(Ordering::Acquire) {
            tracing::debug!("connection shed");
            break;
        }
        let deadline = tracker.deadline();
        if deadline.is_some_and(|at| at <= Instant::now()) {
            tracing::debug!("connection closed: no request head in time");
            break;
        }
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                break;
            }
            () = tracker.signal.wake.notified() => {}
            () = sleep => {}
            changed = stopped.changed(), if !draining => {
                // A closed channel means the server is gone: drain as well.
                let _ = changed;
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_keeps_a_reserve_for_the_store_and_the_runs() {
        assert_eq!(connection_cap(1024, 2), 1024 - 384);
        assert_eq!(connection_cap(20_000, 2), 15_000);
        assert_eq!(connection_cap(1_048_576, 8), 786_432);
        assert_eq!(connection_cap(256, 2), 16);
        assert_eq!(connection_cap(0, 0), 16);
    }

    fn registry(max_connections: usize) -> Arc<Registry> {
        Arc::new(Registry {
            limits: ConnectionLimits {
                max_connections,
                ..ConnectionLimits::default()
            },
            table: Mutex::default(),
        })
    }

    /// A connection from the one address most tests need.
    fn open(registry: &Arc<Registry>) -> Arc<Tracker> {
        open_from(registry, "192.0.2.1")
    }

    fn open_from(registry: &Arc<Registry>, peer: &str) -> Arc<Tracker> {
        match registry.admit(Instant::now(), peer.parse().unwrap()) {
            Admission::Open(tracker) => tracker,
            Admission::Refuse => panic!("refused"),
        }
    }

    fn admit(registry: &Arc<Registry>) -> Admission {
        registry.admit(Instant::now(), "192.0.2.1".parse().unwrap())
    }

    fn shed(tracker: &Tracker) -> bool {
        tracker.signal.shed.load(Ordering::Acquire)
    }

    #[tokio::test]
    async fn at_the_cap_anonymous_connections_go_first_and_authenticated_requests_never() {
        let registry = registry(4);
        // A valid client: a request in flight, then one idle between requests.
        let streaming = open(&registry);
        streaming.request_started();
        registry.update(streaming.id, |slot| slot.authenticated = true);
        let idle_client = open(&registry);
        idle_client.request_started();
        registry.update(idle_client.id, |slot| slot.authenticated = true);
        idle_client.request_finished();
        // Two anonymous sockets: one that sent nothing, one with a 401 in flight.
        let silent = open(&registry);
        let anonymous = open(&registry);
        anonymous.request_started();
        // The cap is reached: a new connection sheds the silent socket, the oldest of the
        // least valuable.
        let newcomer = open(&registry);
        assert!(shed(&silent));
        drop(silent);
        // Then: the newcomer (no request yet), the anonymous request in flight, the idle valid
        // client; a valid request in flight never.
        for (next, others) in [
            (&newcomer, [&anonymous, &idle_client]),
            (&anonymous, [&idle_client, &streaming]),
            (&idle_client, [&streaming, &streaming]),
        ] {
            assert!(registry.lock().shed_one());
            assert!(shed(next));
            assert!(others.iter().all(|other| !shed(other)));
        }
        assert!(!registry.lock().shed_one());
        assert!(!shed(&streaming));
    }

    fn authenticate(registry: &Registry, tracker: &Tracker) {
        registry.update(tracker.id, |slot| slot.authenticated = true);
    }

    #[test]
    fn the_share_of_an_address_is_a_sixteenth_of_the_cap_and_at_least_8() {
        assert_eq!(max_anonymous_per_address(1), 8);
        assert_eq!(max_anonymous_per_address(16), 8);
        assert_eq!(max_anonymous_per_address(200), 12);
        assert_eq!(max_anonymous_per_address(1024), 64);
    }

    #[test]
    fn addresses_count_per_ipv4_address_and_per_ipv6_64() {
        let key = |text: &str| address_key(Some(text.parse().unwrap()));
        assert_eq!(key("192.0.2.1"), key("::ffff:192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        // An IPv6 address whose /64 looks like an IPv4 key is still not that IPv4 address.
        assert_ne!(key("::c000:201"), key("192.0.2.1"));
        assert_ne!(address_key(None), key("255.255.255.255"));
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_share_and_displaces_its_own_connections() {
        // A cap of 64: a share of 8 per address, far below the cap.
        let registry = registry(64);
        let other = open_from(&registry, "198.51.100.7");
        let flood: Vec<_> = (0..8).map(|_| open(&registry)).collect();
        assert!(flood.iter().chain([&other]).all(|tracker| !shed(tracker)));
        // The ninth displaces the address's own oldest; the other address is untouched, and
        // the newcomer is admitted.
        let ninth = open(&registry);
        assert!(shed(&flood[0]));
        assert!(flood[1..].iter().chain([&other, &ninth]).all(|t| !shed(t)));
        // Within the address, idle sockets go before a request in flight, however old it is.
        flood[1].request_started();
        let tenth = open(&registry);
        assert!(shed(&flood[2]) && !shed(&flood[1]));
        // A connection that presented a valid token stops counting: the next one displaces
        // nothing, the one after the oldest idle anonymous connection, never the valid one.
        authenticate(&registry, &flood[3]);
        let eleventh = open(&registry);
        assert!(flood[3..].iter().all(|t| !shed(t)));
        let twelfth = open(&registry);
        assert!(shed(&flood[4]) && !shed(&flood[3]));
        // One IPv6 /64 is one address: its ninth connection displaces its first.
        let v6: Vec<_> = (0..8)
            .map(|n| open_from(&registry, &format!("2001:db8:1:2::{:x}", n + 1)))
            .collect();
        let elsewhere = open_from(&registry, "2001:db8:1:3::1");
        assert!(v6.iter().chain([&elsewhere]).all(|t| !shed(t)));
        let ninth_v6 = open_from(&registry, "2001:db8:1:2:ffff::9");
        assert!(shed(&v6[0]) && !shed(&elsewhere));
        assert!(v6[1..].iter().all(|t| !shed(t)));
        assert!(!shed(&other));
        // Displaced connections that have not closed yet: 3 of the 8 the address may have (and
        // the /64's one); 5 more new connections displace 5 more, the next one is refused.
        let more: Vec<_> = (0..5).map(|_| open(&registry)).collect();
        assert_eq!(registry.lock().closing.values().sum::<usize>(), 9);
        assert!(matches!(admit(&registry), Admission::Refuse));
        assert!(!shed(&other) && !shed(&elsewhere));
        // Once one of them has closed, a new connection displaces the oldest again.
        let mut flood = flood;
        drop(flood.remove(0));
        let displacing = open(&registry);
        {
            let table = registry.lock();
            assert_eq!(table.closing.values().sum::<usize>(), 9);
            let anonymous: usize = table.anonymous.values().map(BTreeSet::len).sum();
            assert_eq!(anonymous, 8 + 8 + 1 + 1);
        }
        assert!(!shed(&displacing));
        drop((flood, ninth, tenth, eleventh, twelfth, v6, more, displacing));
        drop((other, elsewhere, ninth_v6));
        assert!(registry.lock().slots.is_empty());
        assert_eq!(registry.lock().shedding, 0);
        assert!(registry.lock().closing.is_empty());
    }

    #[tokio::test]
    async fn at_the_cap_the_address_with_the_most_anonymous_connections_goes_first() {
        // A cap of 16: a share of 8 per address.
        let registry = registry(16);
        // A client whose new connection has not sent its head yet: the oldest of all.
        let fresh = open_from(&registry, "198.51.100.7");
        // A valid client, idle between requests, and one with a request in flight.
        let idle_valid = open_from(&registry, "198.51.100.8");
        idle_valid.request_started();
        authenticate(&registry, &idle_valid);
        idle_valid.request_finished();
        let streaming = open_from(&registry, "198.51.100.9");
        streaming.request_started();
        authenticate(&registry, &streaming);
        // A flood: 7 from one address (the first with an anonymous request in flight), 6 from
        // one IPv6 /64, over two of its addresses.
        let flood: Vec<_> = (0..7).map(|_| open(&registry)).collect();
        flood[0].request_started();
        let v6: Vec<_> = (0..6)
            .map(|n| open_from(&registry, &format!("2001:db8:1:2::{}", n % 2 + 1)))
            .collect();
        assert_eq!(registry.lock().slots.len(), 16);
        // At the cap a newcomer sheds the oldest idle socket of the address with the most.
        let newcomer = open_from(&registry, "203.0.113.1");
        assert!(shed(&flood[1]));
        let everyone = || {
            flood
                .iter()
                .chain(&v6)
                .chain([&fresh, &idle_valid, &streaming, &newcomer])
        };
        assert_eq!(everyone().filter(|t| shed(t)).count(), 1);
        // Then the two floods (6 connections each now): the address with more first, the one
        // with the older first connection between equals, alternating down to one each.
        let mut order = Vec::new();
        while registry.lock().shed_one() {
            let next = everyone()
                .find(|t| shed(t) && t.id != flood[1].id && !order.contains(&t.id))
                .unwrap();
            order.push(next.id);
        }
        assert_eq!(
            order[..10],
            [
                flood[2].id,
                v6[0].id,
                flood[3].id,
                v6[1].id,
                flood[4].id,
                v6[2].id,
                flood[5].id,
                v6[3].id,
                flood[6].id,
                v6[4].id,
            ]
        );
        // Only with one anonymous connection left per address does the fresh connection of the
        // client go: between equals by class (idle before in flight), the oldest first.
        assert_eq!(
            order[10..14],
            [fresh.id, v6[5].id, newcomer.id, flood[0].id]
        );
        // The valid client's idle connection last; its request in flight never.
        assert_eq!(order.last(), Some(&idle_valid.id));
        assert!(!shed(&streaming));
        assert_eq!(order.len(), 15);
    }

    #[tokio::test]
    async fn connections_that_cannot_be_shed_make_new_ones_refused() {
        let registry = registry(2);
        let a = open(&registry);
        let b = open(&registry);
        for tracker in [&a, &b] {
            tracker.request_started();
            registry.update(tracker.id, |slot| slot.authenticated = true);
        }
        assert!(matches!(admit(&registry), Admission::Refuse));
        b.request_finished();
        assert!(matches!(admit(&registry), Admission::Open(_)));
        assert!(shed(&b));
        assert!(!shed(&a));
    }

    #[tokio::test]
    async fn deadlines_follow_the_request_cycle() {
        let registry = registry(8);
        let tracker = open(&registry);
        let fresh = tracker.deadline().unwrap();
        assert!(fresh <= Instant::now() + DEFAULT_HEADER_TIMEOUT);
        tracker.request_started();
        assert_eq!(tracker.deadline(), None);
        tracker.request_finished();
        let idle = tracker.deadline().unwrap();
        assert!(idle > Instant::now() + DEFAULT_HEADER_TIMEOUT);
        assert!(tracker.signal.waiting.load(Ordering::Acquire));
        tracker.head_started();
        assert!(tracker.deadline().unwrap() <= Instant::now() + DEFAULT_HEADER_TIMEOUT);
        // Past half the cap, new connections get a quarter of the header timeout.
        let more: Vec<_> = (0..5).map(|_| open(&registry)).collect();
        let pressed = more[4].deadline().unwrap();
        assert!(pressed <= Instant::now() + DEFAULT_HEADER_TIMEOUT / 4);
        assert!(more[3].deadline().unwrap() > Instant::now() + DEFAULT_HEADER_TIMEOUT / 4);
        drop((tracker, more));
        assert!(registry.lock().slots.is_empty());
    }
}
