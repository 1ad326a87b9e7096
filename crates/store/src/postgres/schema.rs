//! Postgres migrations, numbered from 1. All pending ones are applied in one transaction that
//! first takes an advisory lock, so workers starting together on many machines migrate once.
//! Never edit a released migration: add the next one.

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

/// Key of the migration advisory lock (the second key is a hash of the schema name).
pub(crate) const MIGRATION_LOCK: i32 = 0x5744_4d47;

const V1: &str = r"
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    owner TEXT NOT NULL,
    prompt TEXT NOT NULL,
    repos TEXT NOT NULL,
    priority INTEGER NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    follow_up_to TEXT REFERENCES tasks (id),
    retry_of TEXT REFERENCES tasks (id),
    result TEXT,
    metadata TEXT NOT NULL,
    run_count BIGINT NOT NULL DEFAULT 0,
    interrupted_runs BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX tasks_queue ON tasks (priority DESC, created_at_ms, id) WHERE status = 'queued';
-- The few tasks holding repositories, for the one-writer-per-repository check.
CREATE INDEX tasks_active ON tasks (id) WHERE status IN ('running', 'testing');
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_owner ON tasks (owner, id);

CREATE TABLE task_repos (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    repo TEXT NOT NULL,
    PRIMARY KEY (task_id, repo)
);
CREATE INDEX task_repos_repo ON task_repos (repo, task_id);

CREATE TABLE runs (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    number BIGINT NOT NULL,
    worker TEXT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    heartbeat_at_ms BIGINT NOT NULL,
    lease_expires_at_ms BIGINT NOT NULL,
    ended_at_ms BIGINT,
    outcome TEXT,
    PRIMARY KEY (task_id, number)
);
CREATE INDEX runs_open ON runs (lease_expires_at_ms) WHERE ended_at_ms IS NULL;

-- Payloads are stored as the exact JSON text that was hashed (not jsonb, which reorders keys).
CREATE TABLE journal (
    task_id TEXT NOT NULL,
    run_number BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (task_id, run_number, seq),
    FOREIGN KEY (task_id, run_number) REFERENCES runs (task_id, number)
);

CREATE FUNCTION warden_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END
$$;
CREATE TRIGGER journal_append_only BEFORE UPDATE OR DELETE ON journal
    FOR EACH ROW EXECUTE FUNCTION warden_append_only();

-- Event sequences come from a counter row whose lock is held until commit, so they follow
-- commit order and a reader resuming after N never misses an event committed later below N.
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('events', 0);

CREATE TABLE events (
    seq BIGINT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    task_seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    event TEXT NOT NULL,
    UNIQUE (task_id, task_seq)
);

CREATE TABLE usage_ledger (
    id BIGSERIAL PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    run_number BIGINT,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_micro_usd BIGINT,
    at_ms BIGINT NOT NULL
);
CREATE INDEX usage_ledger_task ON usage_ledger (task_id);
CREATE INDEX usage_ledger_at ON usage_ledger (at_ms);
CREATE TRIGGER usage_ledger_append_only BEFORE UPDATE OR DELETE ON usage_ledger
    FOR EACH ROW EXECUTE FUNCTION warden_append_only();

CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    kind TEXT NOT NULL,
    subject_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    decided_by TEXT,
    decided_at_ms BIGINT,
    consumed_at_ms BIGINT
);
CREATE INDEX approvals_status ON approvals (status, created_at_ms);

CREATE TABLE idempotency_keys (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner, key)
);

CREATE TABLE outbox (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL,
    lease_owner TEXT,
    lease_expires_at_ms BIGINT,
    last_error TEXT,
    created_at_ms BIGINT NOT NULL,
    done_at_ms BIGINT
);
CREATE INDEX outbox_due ON outbox (next_attempt_at_ms, created_at_ms, id) WHERE status = 'pending';
CREATE INDEX outbox_task ON outbox (task_id, created_at_ms);
";

/// Registered repositories (`/v1/repos`).
const V2: &str = r"
CREATE TABLE repos (
    name TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    branch TEXT,
    checks TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
";

/// API tokens (stored by digest), task conversations, result callbacks.
const V3: &str = r"
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);

CREATE TABLE task_messages (
    task_id TEXT NOT NULL REFERENCES tasks (id),
    seq BIGINT NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

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
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE web_sessions (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    role_at_sign_in TEXT NOT NULL,
    -- 'password', or the hex SHA-256 digest of the API token that signed in.
    credential TEXT NOT NULL,
    address TEXT,
    user_agent TEXT,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE INDEX web_sessions_name ON web_sessions (name, created_at_ms);
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at_ms);
";

/// Chat interfaces (Telegram): the updates handled (deduplicated by update id), the polling
/// offset per channel, and the outbound messages with the id the channel returned for each.
const V6: &str = r"
CREATE TABLE chat_updates (
    channel TEXT NOT NULL,
    update_id BIGINT NOT NULL,
    handled_at_ms BIGINT NOT NULL,
    PRIMARY KEY (channel, update_id)
);

CREATE TABLE chat_offsets (
    channel TEXT PRIMARY KEY,
    next_offset BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE chat_messages (
    id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    chat TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    markup TEXT,
    state TEXT NOT NULL,
    message_id TEXT,
    revision BIGINT NOT NULL,
    delivered_revision BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    next_attempt_at_ms BIGINT NOT NULL,
    last_error TEXT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
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
