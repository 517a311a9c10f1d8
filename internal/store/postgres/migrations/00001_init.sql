-- The schema of chatd's PostgreSQL store: the SQLite store's schema (its migrations 00001 to 00007) as
-- one migration, in PostgreSQL's own types. Times are timestamptz (microseconds, as SQLite keeps them);
-- JSON that must come back byte for byte (metadata, payloads, arguments, event data) is json, which keeps
-- its text; JSON the store queries into (a key's limits) is jsonb; a queued run's request, opaque to the
-- store, is bytea. Ids are COLLATE "C" so that they sort byte-wise, as Go compares them.
--
-- The invariants live here as in SQLite: one running run per session (a partial unique index), an
-- idempotency key once per user, a Seq once per session, an event Seq once per run, one answer per tool
-- call, and a tool record only for a call its parent holds. The store also locks a session's row in every
-- transaction that writes its records or runs, so that the checks it makes in SQL (no open call before a
-- record) see every earlier write of that session.

-- +goose Up
CREATE TABLE sessions (
    id         TEXT COLLATE "C" PRIMARY KEY,
    user_id    TEXT COLLATE "C" NOT NULL,
    title      TEXT NOT NULL DEFAULT '',
    agent      TEXT NOT NULL DEFAULT '',
    metadata   JSON NOT NULL DEFAULT '{}',
    -- last_seq is the Seq of the session's newest record; AppendRecord increments it, and that row's
    -- lock is also what serializes the writes to one session.
    last_seq   BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- The sessions list: newest first, id as the tiebreak the cursor carries.
CREATE INDEX sessions_by_user_updated ON sessions (user_id, updated_at DESC, id DESC);

-- Records are only ever inserted: a conversation is appended to, never rewritten.
CREATE TABLE records (
    id              TEXT COLLATE "C" PRIMARY KEY,
    session_id      TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id         TEXT COLLATE "C" NOT NULL,
    seq             BIGINT NOT NULL,
    run_id          TEXT COLLATE "C",
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content         TEXT NOT NULL DEFAULT '',
    attachments     JSON,
    reasoning       TEXT NOT NULL DEFAULT '',
    parent_id       TEXT COLLATE "C",
    tool_call_id    TEXT COLLATE "C",
    name            TEXT NOT NULL DEFAULT '',
    success         BOOLEAN,
    duration_ms     BIGINT,
    payload         JSON,
    model           TEXT NOT NULL DEFAULT '',
    finish_reason   TEXT NOT NULL DEFAULT '',
    usage           JSON,
    replay          JSON,
    summary_through TEXT COLLATE "C",
    retracts        TEXT COLLATE "C",
    created_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (session_id, seq),
    -- One answer per call: a second tool record for the same (assistant record, call id) cannot exist.
    UNIQUE (parent_id, tool_call_id),
    CHECK ((role = 'tool') = (parent_id IS NOT NULL)),
    CHECK ((role = 'tool') = (tool_call_id IS NOT NULL))
);

-- One row per tool call of an assistant record, so that pairing can be checked by the database and
-- arguments round-trip byte for byte.
CREATE TABLE tool_calls (
    record_id  TEXT COLLATE "C" NOT NULL REFERENCES records (id) ON DELETE CASCADE,
    call_id    TEXT COLLATE "C" NOT NULL CHECK (call_id <> ''),
    session_id TEXT COLLATE "C" NOT NULL,
    run_id     TEXT COLLATE "C",
    idx        INTEGER NOT NULL,
    name       TEXT NOT NULL,
    arguments  JSON NOT NULL,
    -- answer_id is the tool record that answered the call, NULL while the call is open.
    answer_id  TEXT COLLATE "C",
    PRIMARY KEY (record_id, call_id)
);

-- A tool record answers a call its parent really holds.
ALTER TABLE records ADD CONSTRAINT records_answers_a_call
    FOREIGN KEY (parent_id, tool_call_id) REFERENCES tool_calls (record_id, call_id);

CREATE INDEX tool_calls_open_by_session ON tool_calls (session_id) WHERE answer_id IS NULL;
CREATE INDEX tool_calls_open_by_run ON tool_calls (run_id) WHERE answer_id IS NULL;

CREATE TABLE runs (
    id                 TEXT COLLATE "C" PRIMARY KEY,
    session_id         TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id            TEXT COLLATE "C" NOT NULL,
    status             TEXT NOT NULL CHECK (status IN
                           ('queued', 'running', 'completed', 'failed', 'cancelled', 'max_iterations', 'interrupted')),
    agent              TEXT NOT NULL DEFAULT '',
    model              TEXT NOT NULL DEFAULT '',
    finish_reason      TEXT NOT NULL DEFAULT '',
    error              TEXT NOT NULL DEFAULT '',
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    -- The caller's Idempotency-Key and a hash of the request it came with.
    idempotency_key    TEXT COLLATE "C",
    request_hash       TEXT NOT NULL DEFAULT '',
    -- A queued run's request, kept so that it can start later, also after a restart.
    request            BYTEA,
    created_at         TIMESTAMPTZ NOT NULL,
    started_at         TIMESTAMPTZ,
    ended_at           TIMESTAMPTZ,
    -- The Seq of the first event recovery appended to the log of a run a dead process left running.
    recovered_from     BIGINT NOT NULL DEFAULT 0,
    -- The Seq up to which the run's events may have reached a client (store.Run.ReservedSeq).
    reserved_seq       BIGINT NOT NULL DEFAULT 0,
    -- The API key the run was started with ('' none).
    key_id             TEXT COLLATE "C" NOT NULL DEFAULT ''
);

CREATE INDEX runs_by_session ON runs (session_id, created_at);
-- One active run per session, whatever the application does, on whichever instance.
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status = 'running';
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Start-up reads the runs a dead process left behind.
CREATE INDEX runs_unfinished ON runs (created_at) WHERE status IN ('queued', 'running');
-- Concurrent-run limits count these.
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
CREATE INDEX runs_active_by_user ON runs (user_id) WHERE status IN ('running', 'queued');

-- The event log of each run: what a client can replay after a disconnect or a restart.
CREATE TABLE run_events (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    type   TEXT NOT NULL,
    data   JSON NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Accounting outlives the sessions and runs it counts, so no foreign keys here.
CREATE TABLE usage (
    id                 TEXT COLLATE "C" PRIMARY KEY,
    user_id            TEXT COLLATE "C" NOT NULL,
    run_id             TEXT COLLATE "C" NOT NULL DEFAULT '',
    session_id         TEXT COLLATE "C" NOT NULL DEFAULT '',
    key_id             TEXT COLLATE "C" NOT NULL DEFAULT '',
    agent              TEXT COLLATE "C" NOT NULL DEFAULT '',
    model              TEXT COLLATE "C" NOT NULL DEFAULT '',
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    cost_nanousd       BIGINT NOT NULL DEFAULT 0,
    -- estimated: the provider reported no usage for the call, so chatd counted it itself.
    estimated          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at         TIMESTAMPTZ NOT NULL
);

CREATE INDEX usage_by_user_time ON usage (user_id, created_at);
CREATE INDEX usage_by_key_time ON usage (key_id, created_at);
CREATE INDEX usage_by_time ON usage (created_at);
-- The usage so far of a run that has not ended is the sum of its entries.
CREATE INDEX usage_by_run ON usage (run_id);

-- Users' API keys. A key's secret is never stored: hash is its SHA-256.
CREATE TABLE api_keys (
    id         TEXT COLLATE "C" PRIMARY KEY,
    user_id    TEXT COLLATE "C" NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    prefix     TEXT NOT NULL,
    hash       BYTEA NOT NULL UNIQUE,
    admin      BOOLEAN NOT NULL DEFAULT FALSE,
    agents     JSONB NOT NULL DEFAULT '[]',
    limits     JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);

CREATE INDEX api_keys_by_user ON api_keys (user_id, created_at DESC);

-- A sign-in ends with its key: revoking or deleting the key deletes them.
CREATE TABLE auth_sessions (
    hash       BYTEA PRIMARY KEY,
    key_id     TEXT COLLATE "C" NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE INDEX auth_sessions_by_key ON auth_sessions (key_id, created_at);
CREATE INDEX auth_sessions_by_expiry ON auth_sessions (expires_at);

-- +goose Down
DROP TABLE auth_sessions;
DROP TABLE api_keys;
DROP TABLE usage;
DROP TABLE run_events;
DROP TABLE runs;
ALTER TABLE records DROP CONSTRAINT records_answers_a_call;
DROP TABLE tool_calls;
DROP TABLE records;
DROP TABLE sessions;
