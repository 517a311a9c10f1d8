-- The schema of chatd's store. Written to stay close to what PostgreSQL accepts ($N parameters,
-- BIGINT unix-microsecond times, JSON as TEXT) so the postgres store can mirror it; the one SQLite-only
-- liberty is the forward reference from records to tool_calls, which PostgreSQL needs as a separate
-- ALTER TABLE.

-- +goose Up
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    title      TEXT NOT NULL DEFAULT '',
    agent      TEXT NOT NULL DEFAULT '',
    metadata   TEXT NOT NULL DEFAULT '{}',
    -- last_seq is the Seq of the session's newest record; AppendRecord increments it, and that
    -- single-row update is also what serializes appends to one session.
    last_seq   BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The sessions list: newest first, id as the tiebreak the cursor carries.
CREATE INDEX sessions_by_user_updated ON sessions (user_id, updated_at DESC, id DESC);

CREATE TABLE records (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id       TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    run_id        TEXT,
    role          TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content       TEXT NOT NULL DEFAULT '',
    attachments   TEXT,
    reasoning     TEXT NOT NULL DEFAULT '',
    parent_id     TEXT,
    tool_call_id  TEXT,
    name          TEXT NOT NULL DEFAULT '',
    success       BOOLEAN,
    duration_ms   BIGINT,
    payload       TEXT,
    model         TEXT NOT NULL DEFAULT '',
    finish_reason TEXT NOT NULL DEFAULT '',
    usage         TEXT,
    created_at    BIGINT NOT NULL,
    UNIQUE (session_id, seq),
    -- One answer per call: a second tool record for the same (assistant record, call id) cannot exist.
    UNIQUE (parent_id, tool_call_id),
    -- A tool record answers a call its parent really holds.
    FOREIGN KEY (parent_id, tool_call_id) REFERENCES tool_calls (record_id, call_id),
    CHECK ((role = 'tool') = (parent_id IS NOT NULL)),
    CHECK ((role = 'tool') = (tool_call_id IS NOT NULL))
);

-- One row per tool call of an assistant record. Calls are kept here rather than as JSON on the record
-- so that pairing can be checked by the database and arguments round-trip byte for byte.
CREATE TABLE tool_calls (
    record_id  TEXT NOT NULL REFERENCES records (id) ON DELETE CASCADE,
    call_id    TEXT NOT NULL CHECK (call_id <> ''),
    session_id TEXT NOT NULL,
    run_id     TEXT,
    idx        INTEGER NOT NULL,
    name       TEXT NOT NULL,
    arguments  TEXT NOT NULL,
    -- answer_id is the tool record that answered the call, NULL while the call is open. It lets the
    -- open-call checks below read a small partial index instead of probing every call of a session.
    answer_id  TEXT,
    PRIMARY KEY (record_id, call_id)
);

CREATE INDEX tool_calls_open_by_session ON tool_calls (session_id) WHERE answer_id IS NULL;
CREATE INDEX tool_calls_open_by_run ON tool_calls (run_id) WHERE answer_id IS NULL;

CREATE TABLE runs (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id            TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN
                           ('running', 'completed', 'failed', 'cancelled', 'max_iterations', 'interrupted')),
    agent              TEXT NOT NULL DEFAULT '',
    model              TEXT NOT NULL DEFAULT '',
    finish_reason      TEXT NOT NULL DEFAULT '',
    error              TEXT NOT NULL DEFAULT '',
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    ended_at           BIGINT
);

CREATE INDEX runs_by_session ON runs (session_id, created_at);
-- Per-user concurrent-run limits count these.
CREATE INDEX runs_running_by_user ON runs (user_id) WHERE status = 'running';

-- Accounting outlives the sessions and runs it counts, so no foreign keys here.
CREATE TABLE usage (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT NOT NULL,
    run_id             TEXT NOT NULL DEFAULT '',
    session_id         TEXT NOT NULL DEFAULT '',
    agent              TEXT NOT NULL DEFAULT '',
    model              TEXT NOT NULL DEFAULT '',
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL
);

CREATE INDEX usage_by_user_time ON usage (user_id, created_at);

-- +goose Down
DROP TABLE usage;
DROP TABLE runs;
DROP TABLE records;
DROP TABLE tool_calls;
DROP TABLE sessions;
