//! What a store tells the rest of its process about its own commits: every event it stored,
//! every run it started, every ledger entry it recorded — each once, right after the
//! transaction that wrote it committed, never for a write that rolled back. Both backends
//! call [`Observers`] at their commit points (events stored inside other transactions, such as
//! the `task_finished` of a run's end or of a cancel, included), so nothing outside the store
//! has to wrap it to see them.
//!
//! An observer hears only this store object's commits: another process's (or another store
//! object's on the same database) arrive through reading the store. A call dropped (cancelled)
//! while its commit was in flight may commit without being told; readers that must not miss
//! anything read the store for what they did not hear of.

use std::sync::{Arc, RwLock, Weak};

use crate::{Claim, EventRecord, Finished, UsageEntry};

/// Hears a store's commits (see the module documentation). Called in the task whose call
/// committed, before that call returns: keep it quick and never block (no store calls, no
/// waiting on locks held across awaits). Every method does nothing unless overridden.
pub trait StoreObserver: Send + Sync {
    /// An event was stored, by `append_event` or with a status change (`task_finished`).
    /// A call's events arrive in their sequence order.
    fn event_stored(&self, record: &EventRecord) {
        let _ = record;
    }

    /// A task was claimed: a new run leased to a worker.
    fn run_started(&self, claim: &Claim) {
        let _ = claim;
    }

    /// A model call's spend was appended to the usage ledger.
    fn usage_recorded(&self, entry: &UsageEntry) {
        let _ = entry;
    }
}

/// The observers of one store (shared by its clones), held weakly: an observer registered
/// with [`crate::Store::add_observer`] hears commits while something else keeps it alive.
#[derive(Default)]
pub(crate) struct Observers {
    list: RwLock<Vec<Weak<dyn StoreObserver>>>,
}

impl Observers {
    pub(crate) fn add(&self, observer: Weak<dyn StoreObserver>) {
        let mut list = self
            .list
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.retain(|o| o.strong_count() > 0);
        list.push(observer);
    }

    /// The live observers, outside the lock (so one may register another while told).
    fn live(&self) -> Vec<Arc<dyn StoreObserver>> {
        let list = self
            .list
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.iter().filter_map(Weak::upgrade).collect()
    }

    /// Events that committed, in sequence order.
    pub(crate) fn events<'a>(&self, records: impl IntoIterator<Item = &'a EventRecord>) {
        let observers = self.live();
        if observers.is_empty() {
            return;
        }
        for record in records {
            for observer in &observers {
                observer.event_stored(record);
            }
        }
    }

    /// The events runs that ended stored with them.
    pub(crate) fn finished<'a>(&self, finished: impl IntoIterator<Item = &'a Finished>) {
        self.events(finished.into_iter().flat_map(|f| &f.events));
    }

    /// Claims that committed.
    pub(crate) fn claims<'a>(&self, claims: impl IntoIterator<Item = &'a Claim>) {
        let observers = self.live();
        if observers.is_empty() {
            return;
        }
        for claim in claims {
            for observer in &observers {
                observer.run_started(claim);
            }
        }
    }

    /// A ledger entry that committed.
    pub(crate) fn usage(&self, entry: &UsageEntry) {
        for observer in self.live() {
            observer.usage_recorded(entry);
        }
    }
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observers")
            .field("count", &self.live().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use warden_protocol::{Event, TaskId};

    #[derive(Default)]
    struct Seen(Mutex<Vec<u64>>);

    impl StoreObserver for Seen {
        fn event_stored(&self, record: &EventRecord) {
            self.0.lock().unwrap().push(record.seq);
        }
    }

    fn record(seq: u64) -> EventRecord {
        EventRecord {
            seq,
            task_seq: seq,
            task: TaskId::from_ulid("01HZY8Q6K9V2M3N4P5R6S7T8V9").unwrap(),
            at_ms: 0,
            event: Event::AgentMessage { text: "x".into() },
        }
    }

    #[test]
    fn observers_are_held_weakly_and_told_in_order() {
        let observers = Observers::default();
        let kept = Arc::new(Seen::default());
        let dropped = Arc::new(Seen::default());
        observers.add(Arc::downgrade(&kept) as Weak<dyn StoreObserver>);
        observers.add(Arc::downgrade(&dropped) as Weak<dyn StoreObserver>);
        observers.events(&[record(1), record(2)]);
        drop(dropped);
        observers.events(&[record(3)]);
        assert_eq!(*kept.0.lock().unwrap(), vec![1, 2, 3]);
        // A dead observer is forgotten at the next registration.
        observers.add(Arc::downgrade(&kept) as Weak<dyn StoreObserver>);
        assert_eq!(observers.list.read().unwrap().len(), 2);
    }
}
