//! Ctrl-C for in-process tasks. The first one cancels the task (the loop stops at its next
//! step; a model call in flight is given a short grace) and makes the command exit 130 once the
//! cancelled result is recorded and printed; a second one exits 130 at once. Before the first
//! task step listens (while pinning), SIGINT keeps its default action, which also ends the
//! process as an interrupt.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tokio::sync::watch;

/// The exit code of an interrupted command (128 + SIGINT), as shells report it.
pub const INTERRUPTED: u8 = 130;

static SEEN: OnceLock<watch::Receiver<bool>> = OnceLock::new();
static INTERRUPTED_ONCE: AtomicBool = AtomicBool::new(false);

/// Resolves at the first Ctrl-C. The listener is installed on first use and lives as long as
/// the process; it must be called inside a tokio runtime.
pub async fn ctrl_c() {
    let mut seen = SEEN.get_or_init(listen).clone();
    // A closed channel (no signal handling available) never resolves, like no Ctrl-C at all.
    if seen.wait_for(|seen| *seen).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Whether a Ctrl-C cancelled this command's task (its exit code is then [`INTERRUPTED`]).
pub fn interrupted() -> bool {
    INTERRUPTED_ONCE.load(Ordering::SeqCst)
}

fn listen() -> watch::Receiver<bool> {
    let (tell, seen) = watch::channel(false);
    // One stream for both signals: a second Ctrl-C that comes before anyone waits again is
    // still seen.
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
        Ok(mut signals) => {
            tokio::spawn(async move {
                if signals.recv().await.is_none() {
                    return;
                }
                INTERRUPTED_ONCE.store(true, Ordering::SeqCst);
                let _ = tell.send(true);
                if signals.recv().await.is_some() {
                    eprintln!("warden: interrupted again: exiting now");
                    std::process::exit(i32::from(INTERRUPTED));
                }
            });
        }
        Err(error) => tracing::warn!(%error, "cannot listen for Ctrl-C"),
    }
    seen
}
