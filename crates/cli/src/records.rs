//! Task records kept under `WARDEN_HOME/tasks/<id>/` until the durable store arrives: the task
//! (prompt, pinned repositories, transcript, result) as JSON written atomically, and one
//! hash-chained journal per run.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use warden_protocol::{
    ChangeResult, QuestionResult, TaskId, TaskKind, TaskStatus, TranscriptEntry,
};
use warden_server::redact::Redactor;

/// One pinned repository of a task, with enough to pin it again for a follow-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoRecord {
    pub name: String,
    /// `path` or `url`.
    pub source_kind: String,
    pub source: String,
    pub commit: String,
    pub tree: String,
    pub root: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRecord {
    pub id: TaskId,
    pub kind: TaskKind,
    pub status: TaskStatus,
    pub prompt: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up_to: Option<TaskId>,
    pub repos: Vec<RepoRecord>,
    /// The conversation so far, oldest first, this task's prompt and reply included.
    pub transcript: Vec<TranscriptEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<QuestionResult>,
    /// The result of a change task (`kind: change`); question tasks use `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_result: Option<ChangeResult>,
    /// A change task's check commands, so a follow-up runs the same ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
}

pub fn task_dir(home: &Path, id: &TaskId) -> PathBuf {
    home.join("tasks").join(id.as_str())
}

pub fn journal_path(home: &Path, id: &TaskId, run: u32) -> PathBuf {
    task_dir(home, id).join("runs").join(format!("{run}.jsonl"))
}

/// Writes the record atomically, registered secrets redacted.
pub fn save(home: &Path, record: &TaskRecord, redactor: &Redactor) -> anyhow::Result<()> {
    let dir = task_dir(home, &record.id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let temporary = dir.join("task.json.tmp");
    let bytes = serde_json::to_vec_pretty(&redactor.json(serde_json::to_value(record)?))?;
    std::fs::write(&temporary, bytes)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, dir.join("task.json"))
        .with_context(|| format!("cannot write the task record in {}", dir.display()))?;
    Ok(())
}

pub fn load(home: &Path, id: &TaskId) -> anyhow::Result<TaskRecord> {
    let path = task_dir(home, id).join("task.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no task {id} under {}", home.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("task record {} is damaged", path.display()))
}

pub fn list(home: &Path) -> anyhow::Result<Vec<TaskRecord>> {
    let dir = home.join("tasks");
    let mut records = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(records),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<TaskId>().ok())
        else {
            continue;
        };
        records.push(load(home, &id)?);
    }
    records.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(records)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a Unix time in milliseconds (the one formatter every
/// interface uses, `warden_server::time::rfc3339`).
pub fn rfc3339(unix_ms: u64) -> String {
    warden_server::time::rfc3339(i64::try_from(unix_ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_212_799_000), "2026-12-02T11:59:59.000Z");
    }
}
