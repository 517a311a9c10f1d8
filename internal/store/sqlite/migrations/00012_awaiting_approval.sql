-- Runs that wait for a person: the status awaiting_approval, and what such a run waits for (awaiting, a
-- JSON object the chat layer owns). An awaiting run holds its session as a running run does (the unique
-- index covers both), but it is not unfinished work for start-up recovery, nor counted as running.
--
-- SQLite cannot change a CHECK constraint in place, so runs is rebuilt. run_events refers to runs, and
-- dropping a parent table with foreign keys on would delete every event: this is SQLite's documented
-- twelve-step rebuild, with foreign keys off outside the transaction (chatd's writer is one connection).
-- (Numbered 00012: 00008–00011 were taken when it was merged.)

-- +goose NO TRANSACTION
-- +goose Up
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE runs_new (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id            TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN
                           ('queued', 'running', 'awaiting_approval', 'completed', 'failed', 'cancelled',
                            'max_iterations', 'interrupted')),
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
    idempotency_key    TEXT,
    request_hash       TEXT NOT NULL DEFAULT '',
    -- A queued or awaiting run's request, kept so that it can start later, also after a restart.
    request            TEXT,
    created_at         BIGINT NOT NULL,
    started_at         BIGINT,
    -- The Seq of the first event recovery appended to the log of a run a dead process left running.
    recovered_from     BIGINT NOT NULL DEFAULT 0,
    ended_at           BIGINT,
    reserved_seq       BIGINT NOT NULL DEFAULT 0,
    key_id             TEXT NOT NULL DEFAULT '',
    -- What an awaiting run waits for; NULL for every other run.
    awaiting           TEXT
);
INSERT INTO runs_new (id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, idempotency_key, request_hash,
    request, created_at, started_at, recovered_from, ended_at, reserved_seq, key_id)
SELECT id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, idempotency_key, request_hash, request,
    created_at, started_at, recovered_from, ended_at, reserved_seq, key_id
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_by_session ON runs (session_id, created_at);
CREATE INDEX runs_running_by_user ON runs (user_id) WHERE status = 'running';
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status IN ('running', 'awaiting_approval');
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_unfinished ON runs (created_at) WHERE status IN ('queued', 'running');
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
CREATE INDEX runs_active_by_user ON runs (user_id) WHERE status IN ('running', 'queued');
CREATE INDEX runs_awaiting ON runs (created_at) WHERE status = 'awaiting_approval';
COMMIT;
PRAGMA foreign_keys = ON;

-- +goose Down
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
UPDATE runs SET status = 'interrupted', error = 'chatd was downgraded while the run waited for approval',
    ended_at = CAST(strftime('%s', 'now') AS BIGINT) * 1000000, request = NULL
WHERE status = 'awaiting_approval';
CREATE TABLE runs_old (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id            TEXT NOT NULL,
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
    idempotency_key    TEXT,
    request_hash       TEXT NOT NULL DEFAULT '',
    request            TEXT,
    created_at         BIGINT NOT NULL,
    started_at         BIGINT,
    recovered_from     BIGINT NOT NULL DEFAULT 0,
    ended_at           BIGINT,
    reserved_seq       BIGINT NOT NULL DEFAULT 0,
    key_id             TEXT NOT NULL DEFAULT ''
);
INSERT INTO runs_old SELECT id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, idempotency_key, request_hash,
    request, created_at, started_at, recovered_from, ended_at, reserved_seq, key_id
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_old RENAME TO runs;
CREATE INDEX runs_by_session ON runs (session_id, created_at);
CREATE INDEX runs_running_by_user ON runs (user_id) WHERE status = 'running';
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status = 'running';
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_unfinished ON runs (created_at) WHERE status IN ('queued', 'running');
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
CREATE INDEX runs_active_by_user ON runs (user_id) WHERE status IN ('running', 'queued');
COMMIT;
PRAGMA foreign_keys = ON;
