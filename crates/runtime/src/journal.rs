//! The run journal: an append-only, hash-chained record of every model decision, argument
//! validation, policy verdict, tool observation and outcome of a run. Each record carries the
//! hash of the previous one, so any edit, removal or reordering is detected by `verify`.

use crate::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// The hash a journal's first record chains to.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a record is about. Closed: a reader can match every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// The run began: task, model, manifest, limits.
    RunStarted,
    /// A model call was about to be made (turn number, message count).
    ModelRequested,
    /// The model's decision, verbatim.
    ModelDecision,
    /// The model call failed for good.
    ModelFailed,
    /// Tool-call arguments failed to parse or to match the tool's schema.
    ArgumentsRejected,
    /// The policy's verdict on a tool call.
    PolicyVerdict,
    /// What a tool returned.
    ToolObservation,
    /// A final submission was rejected by validation.
    SubmissionRejected,
    /// A limit stopped the run before a model call.
    LimitReached,
    /// The run ended, with its outcome and usage.
    RunFinished,
    /// A person approved or rejected something bound to a hash.
    ApprovalDecided,
    /// A side effect (a push, a pull request) is about to start: written before it starts.
    SideEffectIntent,
    /// What a side effect did, as confirmed by asking the remote.
    SideEffectOutcome,
    /// The risk gate's decision on a change's request (before the run) or its proposal (after):
    /// the level, the policy's action, the reasons.
    GateDecided,
    /// The reviewer's findings on a change whose checks passed, and its verdict.
    Review,
    /// A message sent to the task while it ran reached the agent before a model call
    /// (`seq`, `turn`); a run after a crash delivers it before the same turn again.
    MessageDelivered,
    /// The conversation was compacted: the attempt, the estimated sizes before and after, and
    /// the model's hand-off note.
    Compacted,
    /// An explorer (a child run sent with the `explore` tool) began, inside its parent's run:
    /// its question, model, tools and limits. Its records follow, up to `ExplorerFinished`.
    ExplorerStarted,
    /// The explorer ended, with its outcome and usage (also counted in its parent's).
    ExplorerFinished,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalRecord {
    pub seq: u64,
    pub at_ms: u64,
    pub kind: RecordKind,
    pub payload: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing the journal file failed.
    #[error("journal i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// A record could not be encoded or decoded.
    #[error("journal record {seq} is malformed: {message}")]
    Malformed { seq: u64, message: String },
    /// The chain is broken: a record was edited, removed or reordered.
    #[error("journal chain broken at record {seq}: {message}")]
    Broken { seq: u64, message: String },
}

/// Where a run's records go: a file here, the durable store in `warden serve`. An append
/// completes only once the record is stored; the loop waits for it before going on.
pub trait Journal: Send {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> BoxFuture<'_, Result<(), JournalError>>;
}

/// Computes a record's hash over everything but the hash itself. `serde_json`'s maps are sorted,
/// so the encoding is canonical.
fn record_hash(
    seq: u64,
    at_ms: u64,
    kind: RecordKind,
    payload: &serde_json::Value,
    prev_hash: &str,
) -> Result<String, JournalError> {
    #[derive(Serialize)]
    struct Hashed<'a> {
        seq: u64,
        at_ms: u64,
        kind: RecordKind,
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
    .map_err(|e| JournalError::Malformed {
        seq,
        message: e.to_string(),
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// A journal kept as JSON lines in one file.
pub struct FileJournal {
    file: File,
    next_seq: u64,
    last_hash: String,
}

impl FileJournal {
    /// Creates a new journal file; refuses to overwrite an existing one.
    pub fn create(path: &Path) -> Result<FileJournal, JournalError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(FileJournal {
            file,
            next_seq: 0,
            last_hash: GENESIS_HASH.to_string(),
        })
    }

    /// Reads a journal and checks its whole chain.
    pub fn verify(path: &Path) -> Result<Vec<JournalRecord>, JournalError> {
        let reader = BufReader::new(File::open(path)?);
        let mut records = Vec::new();
        let mut prev = GENESIS_HASH.to_string();
        for (index, line) in reader.lines().enumerate() {
            let seq = index as u64;
            let line = line?;
            let record: JournalRecord =
                serde_json::from_str(&line).map_err(|e| JournalError::Malformed {
                    seq,
                    message: e.to_string(),
                })?;
            if record.seq != seq {
                return Err(JournalError::Broken {
                    seq,
                    message: format!("expected sequence {seq}, found {}", record.seq),
                });
            }
            if record.prev_hash != prev {
                return Err(JournalError::Broken {
                    seq,
                    message: "previous-hash link does not match".into(),
                });
            }
            let expected = record_hash(
                record.seq,
                record.at_ms,
                record.kind,
                &record.payload,
                &record.prev_hash,
            )?;
            if expected != record.hash {
                return Err(JournalError::Broken {
                    seq,
                    message: "record content does not match its hash".into(),
                });
            }
            prev = record.hash.clone();
            records.push(record);
        }
        Ok(records)
    }
}

impl Journal for FileJournal {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> BoxFuture<'_, Result<(), JournalError>> {
        Box::pin(std::future::ready(self.append_now(at_ms, kind, payload)))
    }
}

impl FileJournal {
    /// Appends synchronously (the file write is a single `write` call).
    pub fn append_now(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> Result<(), JournalError> {
        let record = JournalRecord::chained(self.next_seq, &self.last_hash, at_ms, kind, payload)?;
        let mut line = serde_json::to_vec(&record).map_err(|e| JournalError::Malformed {
            seq: record.seq,
            message: e.to_string(),
        })?;
        line.push(b'\n');
        // One write per record: a crash leaves at most a torn last line, which `verify` reports.
        self.file.write_all(&line)?;
        self.last_hash = record.hash;
        self.next_seq += 1;
        Ok(())
    }
}

impl JournalRecord {
    /// The record that follows `prev_hash` at position `seq`, with its hash computed.
    pub fn chained(
        seq: u64,
        prev_hash: &str,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> Result<JournalRecord, JournalError> {
        let hash = record_hash(seq, at_ms, kind, &payload, prev_hash)?;
        Ok(JournalRecord {
            seq,
            at_ms,
            kind,
            payload,
            prev_hash: prev_hash.to_string(),
            hash,
        })
    }
}

/// Keeps records in memory (tests, benchmarks).
#[derive(Debug, Default)]
pub struct MemoryJournal {
    pub records: Vec<JournalRecord>,
}

impl Journal for MemoryJournal {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> BoxFuture<'_, Result<(), JournalError>> {
        Box::pin(std::future::ready(self.append_now(at_ms, kind, payload)))
    }
}

impl MemoryJournal {
    pub fn append_now(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: serde_json::Value,
    ) -> Result<(), JournalError> {
        let prev_hash = self
            .records
            .last()
            .map_or(GENESIS_HASH, |r| r.hash.as_str());
        let record =
            JournalRecord::chained(self.records.len() as u64, prev_hash, at_ms, kind, payload)?;
        self.records.push(record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_three(path: &Path) {
        let mut journal = FileJournal::create(path).unwrap();
        journal
            .append_now(1, RecordKind::RunStarted, json!({"task": "t"}))
            .unwrap();
        journal
            .append_now(2, RecordKind::ModelDecision, json!({"text": "hi"}))
            .unwrap();
        journal
            .append_now(3, RecordKind::RunFinished, json!({"outcome": "answer"}))
            .unwrap();
    }

    #[test]
    fn a_written_journal_verifies_and_chains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        write_three(&path);
        let records = FileJournal::verify(&path).unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].prev_hash, GENESIS_HASH);
        assert_eq!(records[1].prev_hash, records[0].hash);
        assert_eq!(records[2].prev_hash, records[1].hash);
    }

    #[test]
    fn create_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        write_three(&path);
        assert!(FileJournal::create(&path).is_err());
    }

    #[test]
    fn tampering_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        write_three(&path);
        let original = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = original.lines().collect();

        let edited = original.replace("\"hi\"", "\"bye\"");
        std::fs::write(&path, edited).unwrap();
        assert!(matches!(
            FileJournal::verify(&path),
            Err(JournalError::Broken { seq: 1, .. })
        ));

        let removed = format!("{}\n{}\n", lines[0], lines[2]);
        std::fs::write(&path, removed).unwrap();
        assert!(matches!(
            FileJournal::verify(&path),
            Err(JournalError::Broken { seq: 1, .. })
        ));

        let torn = format!("{}\n{}", lines[0], &lines[1][..lines[1].len() / 2]);
        std::fs::write(&path, torn).unwrap();
        assert!(matches!(
            FileJournal::verify(&path),
            Err(JournalError::Malformed { seq: 1, .. })
        ));
    }

    #[test]
    fn memory_and_file_journals_hash_identically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        write_three(&path);
        let mut memory = MemoryJournal::default();
        memory
            .append_now(1, RecordKind::RunStarted, json!({"task": "t"}))
            .unwrap();
        memory
            .append_now(2, RecordKind::ModelDecision, json!({"text": "hi"}))
            .unwrap();
        memory
            .append_now(3, RecordKind::RunFinished, json!({"outcome": "answer"}))
            .unwrap();
        assert_eq!(memory.records, FileJournal::verify(&path).unwrap());
    }
}
