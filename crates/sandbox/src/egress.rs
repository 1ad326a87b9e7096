//! The host side of an egress relay ([`crate::ViewSpec::egress_proxy`]), for one command.
//!
//! The sandboxed process opens a listening socket on `127.0.0.1:`[`PORT`] of its own network
//! namespace (which holds only `lo`) and hands it over before it runs anything of the command
//! (`linux/child.rs`); the command keeps no descriptor of it. Here, in the Warden process and
//! so in the host's network, a thread accepts what connects to it and relays each connection,
//! byte for byte, to the one proxy address the view was opened with. The command cannot choose
//! another destination: whatever it sends goes to the proxy, which decides what it may reach.
//! Warden does not read the bytes (HTTP, `CONNECT` tunnels and TLS pass through unchanged).
//!
//! At most [`MAX_CONNECTIONS`] are relayed at once (more are closed as they arrive); the relay
//! stops, closing the listener and every connection, when the command ends.

use crate::sys;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The port the relay listens on inside a command's network namespace (squid's usual one;
/// each command has its own namespace, so it collides with nothing).
pub(crate) const PORT: u16 = 3128;

/// Connections relayed at once; further ones are closed as they arrive.
pub(crate) const MAX_CONNECTIONS: usize = 16;

/// How long dialing the proxy may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running relay; [`EgressRelay::stop`] (or dropping it) ends it.
pub(crate) struct EgressRelay {
    /// Closing the write end wakes the accepting thread (its read end hangs up).
    stop: Option<OwnedFd>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    stopped: AtomicBool,
    /// Connections that reached the proxy.
    relayed: AtomicU32,
    /// Connections being handled (dialing or relaying).
    active: AtomicUsize,
    /// Copies of the relayed sockets, shut down at stop: `(id, client, upstream)`.
    live: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
}

impl EgressRelay {
    /// Starts the accepting thread. It first waits on `channel` (a unix socket) for the
    /// listener the sandboxed process sends; if the process ends without sending one, the
    /// thread ends too.
    pub(crate) fn start(channel: OwnedFd, proxy: String) -> io::Result<EgressRelay> {
        let (stop_read, stop_write) = sys::pipe()?;
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("warden-egress".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&channel, &stop_read, &proxy, &shared)
            })?;
        Ok(EgressRelay {
            stop: Some(stop_write),
            shared,
            thread: Some(thread),
        })
    }

    /// Stops accepting, closes the listener and every relayed connection (both ends see them
    /// shut down), and returns how many connections reached the proxy.
    pub(crate) fn stop(&mut self) -> u32 {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.stop = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let live = std::mem::take(
            &mut *self
                .shared
                .live
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, client, upstream) in live {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
        self.shared.relayed.load(Ordering::SeqCst)
    }
}

impl Drop for EgressRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(channel: &OwnedFd, stop: &OwnedFd, proxy: &str, shared: &Arc<Shared>) {
    let listener = match sys::poll_readable(&[channel.as_fd(), stop.as_fd()], None) {
        Ok(ready) if ready.first() == Some(&true) && ready.get(1) != Some(&true) => {
            match sys::recv_fd(channel.as_fd()) {
                Ok(Some(fd)) => TcpListener::from(fd),
                _ => return,
            }
        }
        _ => return,
    };
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut next_id = 0u64;
    loop {
        let ready = match sys::poll_readable(&[listener.as_fd(), stop.as_fd()], None) {
            Ok(ready) => ready,
            Err(_) => return,
        };
        if ready.get(1) == Some(&true) || shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        if ready.first() != Some(&true) {
            continue;
        }
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(error) => match error.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::Interrupted
                | io::ErrorKind::ConnectionAborted => continue,
                _ => return,
            },
        };
        if shared.active.load(Ordering::SeqCst) >= MAX_CONNECTIONS
            || client.set_nonblocking(false).is_err()
        {
            continue;
        }
        next_id += 1;
        let id = next_id;
        shared.active.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("warden-egress-conn".into())
            .spawn({
                let shared = Arc::clone(shared);
                let proxy = proxy.to_owned();
                move || {
                    relay_connection(id, client, &proxy, &shared);
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Dials the proxy (each address it resolves to, in turn).
fn dial(proxy: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the proxy resolves to no address");
    for address in proxy.to_socket_addrs()? {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Relays one connection both ways until both directions end (or stop shuts them down).
fn relay_connection(id: u64, client: TcpStream, proxy: &str, shared: &Shared) {
    let Ok(upstream) = dial(proxy) else {
        // The command sees its connection closed, as it would from an unreachable proxy.
        return;
    };
    let copies = (|| Some((client.try_clone().ok()?, upstream.try_clone().ok()?)))();
    let Some((client_copy, upstream_copy)) = copies else {
        return;
    };
    {
        let mut live = shared.live.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        live.push((id, client_copy, upstream_copy));
    }
    shared.relayed.fetch_add(1, Ordering::SeqCst);
    let upward = (|| Some((client.try_clone().ok()?, upstream.try_clone().ok()?)))();
    if let Some((client_reader, upstream_writer)) = upward {
        let up = std::thread::Builder::new()
            .name("warden-egress-up".into())
            .spawn(move || pipe_one_way(client_reader, upstream_writer));
        if let Ok(up) = up {
            pipe_one_way(upstream, client);
            let _ = up.join();
        }
    }
    shared
        .live
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|(live_id, _, _)| *live_id != id);
}

/// Copies `from` into `to` until end of file, then half-closes `to`; on an error both sockets
/// are shut down so the other direction ends too.
fn pipe_one_way(mut from: TcpStream, mut to: TcpStream) {
    match io::copy(&mut from, &mut to) {
        Ok(_) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}
