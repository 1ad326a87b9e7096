//! Revocations as they happen, for whatever holds a credential open (the API's event streams),
//! so it can stop at once instead of at its next periodic check.
//!
//! - Every revocation this process makes through [`super::Access`] (a stored token revoked, a
//!   web session revoked or signed out, a password set, a web user removed) is announced by
//!   the name of the principal it concerns before the call returns: a holder that looks before
//!   sending anything sends nothing after the revocation.
//! - Revocations other processes make on the same database (`warden web passwd`, `warden token
//!   revoke`, `warden web sessions revoke`, `warden web remove`) are found by one poller per
//!   process: while anyone watches it compares the store's tokens, web users and active
//!   sessions every poll interval ([`DEFAULT_REVOCATION_POLL`]) and announces the names whose
//!   credentials changed or ended (a session that expired included). Its first look is taken
//!   at once and followed by an announcement that concerns every watch: what changed before
//!   the poller had something to compare with is found by each holder's own re-check.
//! - A new watch is concerned once from the start, so its holder re-checks its credential
//!   before sending anything: a revocation announced between the holder's authentication and
//!   its watch is not missed.
//! - A [`RevocationWatch`] wakes on every announcement and says whether one since it last
//!   looked may concern its name ([`RevocationWatch::concerns`]: also when more came than are
//!   remembered), so a holder re-checks its credential, one store read, only when it may have
//!   ended.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use warden_store::{Store, StoreError};

/// How often the store is compared for revocations other processes made, while watched.
pub const DEFAULT_REVOCATION_POLL: Duration = Duration::from_secs(1);

/// Announcements remembered for [`RevocationWatch::concerns`]; a watch that missed more
/// re-checks.
const RECENT: usize = 256;

/// The announcements of one process (shared by the clones of its [`super::Access`]).
pub struct Revocations {
    /// The number of announcements so far.
    generation: watch::Sender<u64>,
    /// The last [`RECENT`] announcements: `(generation, name)`.
    recent: Mutex<VecDeque<(u64, String)>>,
    polling: AtomicBool,
    poll: Duration,
}

impl std::fmt::Debug for Revocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revocations")
            .field("generation", &*self.generation.borrow())
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Revocations {
    pub(super) fn new(poll: Duration) -> Revocations {
        Revocations {
            generation: watch::channel(0).0,
            recent: Mutex::new(VecDeque::new()),
            polling: AtomicBool::new(false),
            poll: poll.max(Duration::from_millis(10)),
        }
    }

    /// Announces that a credential of `name` may have ended.
    pub fn announce(&self, name: &str) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = *self.generation.borrow() + 1;
        recent.push_back((generation, name.to_string()));
        while recent.len() > RECENT {
            recent.pop_front();
        }
        // Raised while the list is held, so a watch that sees the generation finds its entry.
        self.generation.send_replace(generation);
    }

    /// A watch for `name`'s credentials, from now on; starts the store poller (once) with
    /// `store`.
    pub(super) fn watch(self: &Arc<Self>, name: &str, store: &Arc<dyn Store>) -> RevocationWatch {
        if !self.polling.swap(true, Ordering::AcqRel) {
            tokio::spawn(poll(Arc::downgrade(self), Arc::clone(store)));
        }
        let receiver = self.generation.subscribe();
        let seen = *receiver.borrow();
        RevocationWatch {
            revocations: Arc::clone(self),
            receiver,
            seen,
            name: name.to_string(),
            fresh: true,
        }
    }
}

/// What one holder of a credential of `name` listens to.
pub struct RevocationWatch {
    revocations: Arc<Revocations>,
    receiver: watch::Receiver<u64>,
    seen: u64,
    name: String,
    /// Not looked at yet: the first [`RevocationWatch::concerns`] says yes.
    fresh: bool,
}

/// The name an announcement that concerns every watch carries (no principal's name is empty).
const EVERYONE: &str = "";

impl std::fmt::Debug for RevocationWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationWatch")
            .field("name", &self.name)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl RevocationWatch {
    /// A receiver that changes on every announcement (of any name), for a wait to select on.
    pub fn signal(&self) -> watch::Receiver<u64> {
        self.receiver.clone()
    }

    /// Whether an announcement since the last call may concern this watch's name (also when
    /// more were made than are remembered); marks them all seen. Reads no store.
    pub fn concerns(&mut self) -> bool {
        let current = *self.receiver.borrow_and_update();
        let fresh = std::mem::take(&mut self.fresh);
        if current == self.seen {
            return fresh;
        }
        let recent = self
            .revocations
            .recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let lost = recent
            .front()
            .is_none_or(|(generation, _)| *generation > self.seen + 1);
        let named = recent.iter().any(|(generation, name)| {
            *generation > self.seen && (*name == self.name || name == EVERYONE)
        });
        self.seen = current;
        fresh || lost || named
    }
}

/// What the store says of every credential, to compare with the next look.
#[derive(Debug, Default, PartialEq, Eq)]
struct Snapshot {
    /// Token id → (name, revoked).
    tokens: HashMap<String, (String, bool)>,
    /// User name → (role, password hash).
    users: HashMap<String, (String, String)>,
    /// Active session id → name.
    sessions: HashMap<String, String>,
}

impl Snapshot {
    async fn take(store: &dyn Store) -> Result<Snapshot, StoreError> {
        Ok(Snapshot {
            tokens: store
                .list_api_tokens()
                .await?
                .into_iter()
                .map(|t| (t.id, (t.name, t.revoked_at_ms.is_some())))
                .collect(),
            users: store
                .list_web_users()
                .await?
                .into_iter()
                .map(|u| (u.name, (u.role, u.password_hash)))
                .collect(),
            sessions: store
                .list_web_sessions(None)
                .await?
                .into_iter()
                .map(|s| (s.id, s.name))
                .collect(),
        })
    }

    /// The names whose credentials ended or changed from `self` to `now`: tokens revoked or
    /// gone, users changed or removed, sessions no longer active.
    fn ended(&self, now: &Snapshot) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for (id, (name, revoked)) in &now.tokens {
            if *revoked && self.tokens.get(id).is_none_or(|(_, was)| !*was) {
                names.insert(name.clone());
            }
        }
        for (id, (name, _)) in &self.tokens {
            if !now.tokens.contains_key(id) {
                names.insert(name.clone());
            }
        }
        for (name, user) in &self.users {
            if now.users.get(name) != Some(user) {
                names.insert(name.clone());
            }
        }
        for (id, name) in &self.sessions {
            if !now.sessions.contains_key(id) {
                names.insert(name.clone());
            }
        }
        names
    }
}

/// Compares the store every poll interval while someone watches and the announcer lives.
async fn poll(revocations: Weak<Revocations>, store: Arc<dyn Store>) {
    let mut before: Option<Snapshot> = None;
    loop {
        let interval = match revocations.upgrade() {
            Some(revocations) => revocations.poll,
            None => return,
        };
        // The first look at once: until then nothing is compared.
        if before.is_some() {
            tokio::time::sleep(interval).await;
        }
        let Some(announcer) = revocations.upgrade() else {
            return;
        };
        if announcer.generation.receiver_count() == 0 {
            // Nobody watches: no reads. The last look stays, so what changed meanwhile is
            // announced (harmlessly) once someone watches again.
            if before.is_none() {
                tokio::time::sleep(interval).await;
            }
            continue;
        }
        match Snapshot::take(store.as_ref()).await {
            Ok(now) => {
                match &before {
                    Some(before) => {
                        for name in before.ended(&now) {
                            tracing::debug!(%name, "a credential ended in the store");
                            announcer.announce(&name);
                        }
                    }
                    // What changed before this first look: every holder checks its own.
                    None => announcer.announce(EVERYONE),
                }
                before = Some(now);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the store's credentials for revocations")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_is_concerned_by_its_own_name_or_by_what_it_missed() {
        let revocations = Arc::new(Revocations::new(DEFAULT_REVOCATION_POLL));
        let receiver = revocations.generation.subscribe();
        let mut watch = RevocationWatch {
            revocations: Arc::clone(&revocations),
            receiver,
            seen: 0,
            name: "alice".into(),
            fresh: true,
        };
        assert!(watch.concerns(), "a new watch re-checks once");
        assert!(!watch.concerns());
        revocations.announce("bob");
        assert!(!watch.concerns());
        revocations.announce("alice");
        revocations.announce("bob");
        assert!(watch.concerns());
        assert!(!watch.concerns());
        for _ in 0..RECENT + 1 {
            revocations.announce("bob");
        }
        assert!(watch.concerns(), "more than are remembered");
        revocations.announce(EVERYONE);
        assert!(watch.concerns(), "an announcement for everyone");
    }

    #[test]
    fn ended_credentials_are_named() {
        let before = Snapshot {
            tokens: HashMap::from([
                ("tok_1".into(), ("ci".into(), false)),
                ("tok_2".into(), ("old".into(), true)),
                ("tok_3".into(), ("gone".into(), false)),
            ]),
            users: HashMap::from([
                ("alice".into(), ("operator".into(), "h1".into())),
                ("bob".into(), ("viewer".into(), "h2".into())),
                ("carol".into(), ("viewer".into(), "h3".into())),
            ]),
            sessions: HashMap::from([
                ("ses_1".into(), "dave".into()),
                ("ses_2".into(), "erin".into()),
            ]),
        };
        let now = Snapshot {
            tokens: HashMap::from([
                ("tok_1".into(), ("ci".into(), true)),
                ("tok_2".into(), ("old".into(), true)),
                ("tok_4".into(), ("brief".into(), true)),
            ]),
            users: HashMap::from([
                ("alice".into(), ("operator".into(), "h1-new".into())),
                ("bob".into(), ("viewer".into(), "h2".into())),
            ]),
            sessions: HashMap::from([
                ("ses_2".into(), "erin".into()),
                ("ses_3".into(), "frank".into()),
            ]),
        };
        let names: Vec<String> = before.ended(&now).into_iter().collect();
        assert_eq!(names, ["alice", "brief", "carol", "ci", "dave", "gone"]);
        assert!(now.ended(&now).is_empty());
    }
}
