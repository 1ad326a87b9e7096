//! Journal records as the store keeps them: the same fields, the same JSON and the same
//! SHA-256 chain as `warden_runtime::journal` (a stored run, written out as JSON lines, passes
//! `FileJournal::verify`). The record kind is kept as its snake_case name so the store needs no
//! change when the runtime adds a kind. Backends check every append against the stored tail in
//! the same transaction, so two writers cannot fork a run's chain.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::JournalRecordStore;
use crate::{BoxFuture, RunRef, Store, StoreError};

/// The hash a run's first record chains to (identical to the runtime's).
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One journal record. Serialises exactly like `warden_runtime::JournalRecord`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub seq: u64,
    pub at_ms: u64,
    /// The runtime's `RecordKind`, by its snake_case name (`run_started`, `model_decision`, …).
    pub kind: String,
    pub payload: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
    /// What showing the record needs from the run's earlier records, recorded by the writer
    /// when it appended the record (outside the hash, and never serialised): for a tool
    /// observation, how much of its output to hide for display (see the engine's
    /// `JournalRedaction`). `None` when the writer recorded nothing (records from before it was
    /// recorded, raw appends): a reader then works it out from the run's earlier records.
    #[serde(skip)]
    pub display: Option<String>,
}

impl JournalEntry {
    /// Builds the record that follows `prev` (or the first record when `prev` is `None`).
    pub fn next(
        prev: Option<&JournalEntry>,
        at_ms: u64,
        kind: &str,
        payload: serde_json::Value,
    ) -> Result<JournalEntry, StoreError> {
        let (seq, prev_hash) = match prev {
            Some(p) => (p.seq + 1, p.hash.clone()),
            None => (0, GENESIS_HASH.to_string()),
        };
        let hash = record_hash(seq, at_ms, kind, &payload, &prev_hash)?;
        Ok(JournalEntry {
            seq,
            at_ms,
            kind: kind.to_string(),
            payload,
            prev_hash,
            hash,
            display: None,
        })
    }

    /// The hash this record's content calls for (compare with `self.hash`).
    pub fn expected_hash(&self) -> Result<String, StoreError> {
        record_hash(
            self.seq,
            self.at_ms,
            &self.kind,
            &self.payload,
            &self.prev_hash,
        )
    }
}

/// The runtime's record hash: SHA-256 over the JSON of everything but the hash, fields in
/// declaration order, the kind as its snake_case string.
fn record_hash(
    seq: u64,
    at_ms: u64,
    kind: &str,
    payload: &serde_json::Value,
    prev_hash: &str,
) -> Result<String, StoreError> {
    #[derive(Serialize)]
    struct Hashed<'a> {
        seq: u64,
        at_ms: u64,
        kind: &'a str,
        payload: &'a serde_json::Value,
        prev_hash: &'a str,
    }
    let bytes = serde_json::to_vec(&Hashed {
        seq,
        at_ms,
        kind,
        payload,
        prev_hash,
    })
    .map_err(|e| StoreError::InvalidData(format!("journal record {seq}: {e}")))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Checks that `entry` may follow `tail` (the run's last stored record, if any): the next
/// sequence number, linked to the tail's hash, with a hash matching its content.
pub(crate) fn check_append(tail: Option<(u64, &str)>, entry: &JournalEntry) -> Result<(), String> {
    let (expected_seq, expected_prev) = match tail {
        Some((seq, hash)) => (seq + 1, hash),
        None => (0, GENESIS_HASH),
    };
    if entry.seq != expected_seq {
        return Err(format!(
            "expected sequence {expected_seq}, got {}",
            entry.seq
        ));
    }
    if entry.prev_hash != expected_prev {
        return Err("previous-hash link does not match the stored chain".into());
    }
    if entry.kind.is_empty() {
        return Err("record kind is empty".into());
    }
    match entry.expected_hash() {
        Ok(hash) if hash == entry.hash => Ok(()),
        Ok(_) => Err("record content does not match its hash".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `entry` continues the record preceding it in its run, given as `(seq, hash)`
/// (`None`: it must be the run's first): next sequence, linked to that hash, with a hash
/// matching its content. A chain read a piece at a time verifies record by record with this.
pub fn continues(before: Option<(u64, &str)>, entry: &JournalEntry) -> bool {
    check_append(before, entry).is_ok()
}

/// Checks a whole chain as read back from the store (like `FileJournal::verify`).
pub fn verify_chain(entries: &[JournalEntry]) -> Result<(), StoreError> {
    let mut tail: Option<(u64, &str)> = None;
    for entry in entries {
        check_append(tail, entry).map_err(|message| StoreError::JournalBroken {
            seq: entry.seq,
            message,
        })?;
        tail = Some((entry.seq, &entry.hash));
    }
    Ok(())
}

/// The two store calls a [`RunJournal`] makes. An `Arc` of any [`Store`] makes them; a caller
/// may make them its own way (a run's store retries them through outages).
pub trait JournalStore: Send + Sync {
    /// [`JournalRecordStore::journal`].
    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>>;

    /// [`JournalRecordStore::append_journal`].
    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: Store + ?Sized> JournalStore for Arc<S> {
    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        JournalRecordStore::journal(self.as_ref(), run)
    }

    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        JournalRecordStore::append_journal(self.as_ref(), run, entry)
    }
}

/// One writer's handle on a run's journal: it keeps the chain's tail, builds each record on it
/// and appends through the store. A second handle on the same run that falls behind gets
/// [`StoreError::JournalConflict`] instead of forking the chain.
pub struct RunJournal {
    store: Box<dyn JournalStore>,
    run: RunRef,
    tail: Option<JournalEntry>,
}

impl std::fmt::Debug for RunJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunJournal")
            .field("run", &self.run)
            .field("next_seq", &self.tail.as_ref().map_or(0, |t| t.seq + 1))
            .finish_non_exhaustive()
    }
}

impl RunJournal {
    /// Continues the run's stored chain (empty for a new run), checking it first.
    pub async fn open(
        store: impl JournalStore + 'static,
        run: RunRef,
    ) -> Result<RunJournal, StoreError> {
        let mut entries = store.journal(&run).await?;
        verify_chain(&entries)?;
        let tail = entries.pop();
        Ok(RunJournal {
            store: Box::new(store),
            run,
            tail,
        })
    }

    pub fn run(&self) -> &RunRef {
        &self.run
    }

    /// The sequence number the next record gets (0: the run's journal is empty).
    pub fn next_seq(&self) -> u64 {
        self.tail.as_ref().map_or(0, |t| t.seq + 1)
    }

    /// Appends one record; on success it is the new tail.
    pub async fn append(
        &mut self,
        at_ms: u64,
        kind: &str,
        payload: serde_json::Value,
    ) -> Result<&JournalEntry, StoreError> {
        self.append_with_display(at_ms, kind, payload, None).await
    }

    /// [`RunJournal::append`] recording `display` with the record (see
    /// [`JournalEntry::display`]).
    pub async fn append_with_display(
        &mut self,
        at_ms: u64,
        kind: &str,
        payload: serde_json::Value,
        display: Option<String>,
    ) -> Result<&JournalEntry, StoreError> {
        let mut entry = JournalEntry::next(self.tail.as_ref(), at_ms, kind, payload)?;
        entry.display = display;
        self.store.append_journal(&self.run, entry.clone()).await?;
        Ok(self.tail.insert(entry))
    }
}

/// The record that ends a run's journal when the run is ended from outside it (a cancel, a
/// task abandoned): `run_finished` with the task's failure when its result has one (the shape
/// the runtime journals), following the run's last record `tail` (`(seq, hash)`), so every
/// ended run's journal says how it ended even when its worker never got to write that.
pub fn ended_from_outside(
    tail: (u64, &str),
    at_ms: u64,
    status: warden_protocol::TaskStatus,
    result: Option<&serde_json::Value>,
) -> Result<JournalEntry, StoreError> {
    let outcome = match result.and_then(|r| r.get("failure")) {
        Some(failure) => serde_json::json!({ "failure": failure }),
        None => serde_json::json!({ "status": crate::state::status_name(status) }),
    };
    let (seq, prev_hash) = (tail.0 + 1, tail.1.to_string());
    let kind = "run_finished";
    let payload = serde_json::json!({ "outcome": outcome, "ended_by": "task_status" });
    let hash = record_hash(seq, at_ms, kind, &payload, &prev_hash)?;
    Ok(JournalEntry {
        seq,
        at_ms,
        kind: kind.to_string(),
        payload,
        prev_hash,
        hash,
        display: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_built_chain_verifies_and_edits_do_not() {
        let a = JournalEntry::next(None, 1, "run_started", json!({"task": "t"})).unwrap();
        let b = JournalEntry::next(Some(&a), 2, "model_decision", json!({"text": "hi"})).unwrap();
        assert_eq!(a.prev_hash, GENESIS_HASH);
        assert_eq!(b.prev_hash, a.hash);
        verify_chain(&[a.clone(), b.clone()]).unwrap();

        let mut edited = b.clone();
        edited.payload = json!({"text": "bye"});
        assert!(matches!(
            verify_chain(&[a.clone(), edited]),
            Err(StoreError::JournalBroken { seq: 1, .. })
        ));
        assert!(matches!(
            verify_chain(std::slice::from_ref(&b)),
            Err(StoreError::JournalBroken { seq: 1, .. })
        ));
    }
}
