//! SQLite migrations, numbered from 1 and applied in order, each in its own transaction together
//! with its `schema_version` row. Never edit a released migration: add the next one.

pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7),
    (8, V8),
];

const V1: &str = r"
CREATE TABLE tasks (
    id TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    owner TEXT NOT NULL,
    prompt TEXT NOT NULL,
    repos TEXT NOT NULL,
    priority INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    follow_up_to TEXT REFERENCES tasks (id),
    retry_of TEXT REFERENCES tasks (id),
    result TEXT,
    metadata TEXT NOT NULL,
    run_count INTEGER NOT NULL DEFAULT 0,
    interrupted_runs INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX tasks_queue ON tasks (priority DESC, created_at_ms, id) WHERE status = 'queued';
-- The few tasks holding repositories, for the one-writer-per-repository check.
CREATE INDEX tasks_active ON tasks (id) WHERE status IN ('running', 'testing');
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_owner ON tasks (owner, id);

-- One row per (task, repository name): the key of the one-writer-per-repository rule.
CREATE TABLE task_repos (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    repo TEXT NOT NULL,
    PRIMARY KEY (task_id, repo)
) STRICT, WITHOUT ROWID;
CREATE INDEX task_repos_repo ON task_repos (repo, task_id);

CREATE TABLE runs (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    number INTEGER NOT NULL,
    worker TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    outcome TEXT,
    PRIMARY KEY (task_id, number)
) STRICT;
CREATE INDEX runs_open ON runs (lease_expires_at_ms) WHERE ended_at_ms IS NULL;

CREATE TABLE journal (
    task_id TEXT NOT NULL,
    run_number INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (task_id, run_number, seq),
    FOREIGN KEY (task_id, run_number) REFERENCES runs (task_id, number)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER journal_append_only_update BEFORE UPDATE ON journal
    BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_append_only_delete BEFORE DELETE ON journal
    BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

-- AUTOINCREMENT: sequences are never reused, and writers are serialised, so they follow
-- commit order.
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    task_seq INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    event TEXT NOT NULL,
    UNIQUE (task_id, task_seq)
) STRICT;

CREATE TABLE usage_ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    run_number INTEGER,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_micro_usd INTEGER,
    at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX usage_ledger_task ON usage_ledger (task_id);
CREATE INDEX usage_ledger_at ON usage_ledger (at_ms);
CREATE TRIGGER usage_ledger_append_only_update BEFORE UPDATE ON usage_ledger
    BEGIN SELECT RAISE(ABORT, 'usage ledger is append-only'); END;
CREATE TRIGGER usage_ledger_append_only_delete BEFORE DELETE ON usage_ledger
    BEGIN SELECT RAISE(ABORT, 'usage ledger is append-only'); END;

CREATE TABLE approvals (
    id TEXT PRIMARY KEY NOT NULL,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    kind TEXT NOT NULL,
    subject_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    decided_by TEXT,
    decided_at_ms INTEGER,
    consumed_at_ms INTEGER
) STRICT;
CREATE INDEX approvals_status ON approvals (status, created_at_ms);

CREATE TABLE idempotency_keys (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner, key)
) STRICT, WITHOUT ROWID;

CREATE TABLE outbox (
    id TEXT PRIMARY KEY NOT NULL,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires_at_ms INTEGER,
    last_error TEXT,
    created_at_ms INTEGER NOT NULL,
    done_at_ms INTEGER
) STRICT;
CREATE INDEX outbox_due ON outbox (next_attempt_at_ms, created_at_ms, id) WHERE status = 'pending';
CREATE INDEX outbox_task ON outbox (task_id, created_at_ms);
";

/// Registered repositories (`/v1/repos`).
const V2: &str = r"
CREATE TABLE repos (
    name TEXT PRIMARY KEY NOT NULL,
    source TEXT NOT NULL,
    branch TEXT,
    checks TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;
";

/// API tokens (stored by digest), task conversations, result callbacks.
const V3: &str = r"
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
) STRICT;

CREATE TABLE task_messages (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
) STRICT, WITHOUT ROWID;

ALTER TABLE tasks ADD COLUMN callback_url TEXT;
";

/// Per-repository sandbox settings: read-only mounts and the commands that fill its cache.
const V4: &str = r"
ALTER TABLE repos ADD COLUMN mounts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE repos ADD COLUMN prepare TEXT NOT NULL DEFAULT '[]';
";

/// The web console's users (passwords as PHC strings) and sessions (cookie secrets as
/// SHA-256 digests).
const V5: &str = r"
CREATE TABLE web_users (
    name TEXT PRIMARY KEY NOT NULL,
    role TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE web_sessions (
    id TEXT PRIMARY KEY NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    role_at_sign_in TEXT NOT NULL,
    -- 'password', or the hex SHA-256 digest of the API token that signed in.
    credential TEXT NOT NULL,
    address TEXT,
    user_agent TEXT,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
) STRICT;
CREATE INDEX web_sessions_name ON web_sessions (name, created_at_ms);
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at_ms);
";

/// Chat interfaces (Telegram): the updates handled (deduplicated by update id), the polling
/// offset per channel, and the outbound messages with the id the channel returned for each.
const V6: &str = r"
CREATE TABLE chat_updates (
    channel TEXT NOT NULL,
    update_id INTEGER NOT NULL,
    handled_at_ms INTEGER NOT NULL,
    PRIMARY KEY (channel, update_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE chat_offsets (
    channel TEXT PRIMARY KEY NOT NULL,
    next_offset INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE chat_messages (
    id TEXT PRIMARY KEY NOT NULL,
    channel TEXT NOT NULL,
    chat TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    markup TEXT,
    state TEXT NOT NULL,
    message_id TEXT,
    revision INTEGER NOT NULL,
    delivered_revision INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    last_error TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX chat_messages_due ON chat_messages (channel, next_attempt_at_ms, created_at_ms, id)
    WHERE state IN ('pending', 'sending') OR (state = 'sent' AND revision > delivered_revision);
CREATE INDEX chat_messages_task ON chat_messages (task_id) WHERE task_id IS NOT NULL;
";

/// What showing a journal record needs from the run's earlier records, recorded at append (see
/// `JournalEntry::display`); NULL for the records written before.
const V7: &str = r"
ALTER TABLE journal ADD COLUMN display TEXT;
";

/// Who made each model call (`agent`, `explorer`, `reviewer`), so spend is reported per role;
/// the entries before it were all the agent's.
const V8: &str = r"
ALTER TABLE usage_ledger ADD COLUMN role TEXT NOT NULL DEFAULT 'agent';
";
