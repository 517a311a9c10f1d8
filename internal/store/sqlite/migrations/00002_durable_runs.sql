-- Durable runs: queued runs, one running run per session enforced by a unique index, idempotency keys,
-- and the per-run event log. SQLite cannot change a CHECK constraint in place, so runs is rebuilt; no
-- table references it by foreign key, so dropping the old table is safe.

-- +goose Up
CREATE TABLE runs_new (
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
    -- The caller's Idempotency-Key and a hash of the request it came with.
    idempotency_key    TEXT,
    request_hash       TEXT NOT NULL DEFAULT '',
    -- A queued run's request, kept so that it can start later, also after a restart.
    request            TEXT,
    created_at         BIGINT NOT NULL,
    started_at         BIGINT,
    -- The Seq of the first event recovery appended to the log of a run a dead process left running.
    recovered_from     BIGINT NOT NULL DEFAULT 0,
    ended_at           BIGINT
);

INSERT INTO runs_new (id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at, started_at, ended_at)
SELECT id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at, created_at, ended_at
FROM runs;

-- The old schema let a session hold several running runs (one whose FinishRun failed stayed behind),
-- which the unique index below refuses. Keep the one with a tool call still open, as only its own end
-- closes it (the pairing invariant allows one such run per session), else the newest; end the others
-- as start-up ends the runs of a dead process: interrupted, with the usage of their entries.
UPDATE runs_new SET status = 'interrupted', error = 'chatd stopped before the run ended',
    ended_at = CAST(strftime('%s', 'now') AS BIGINT) * 1000000,
    input_tokens = (SELECT COALESCE(SUM(u.input_tokens), 0) FROM usage u
        WHERE u.run_id = runs_new.id AND u.user_id = runs_new.user_id),
    output_tokens = (SELECT COALESCE(SUM(u.output_tokens), 0) FROM usage u
        WHERE u.run_id = runs_new.id AND u.user_id = runs_new.user_id),
    cache_read_tokens = (SELECT COALESCE(SUM(u.cache_read_tokens), 0) FROM usage u
        WHERE u.run_id = runs_new.id AND u.user_id = runs_new.user_id),
    cache_write_tokens = (SELECT COALESCE(SUM(u.cache_write_tokens), 0) FROM usage u
        WHERE u.run_id = runs_new.id AND u.user_id = runs_new.user_id),
    reasoning_tokens = (SELECT COALESCE(SUM(u.reasoning_tokens), 0) FROM usage u
        WHERE u.run_id = runs_new.id AND u.user_id = runs_new.user_id)
WHERE status = 'running' AND id <> (
    SELECT r.id FROM runs_new r WHERE r.session_id = runs_new.session_id AND r.status = 'running'
    ORDER BY EXISTS (SELECT 1 FROM tool_calls c WHERE c.run_id = r.id AND c.answer_id IS NULL) DESC,
        r.created_at DESC, r.id DESC
    LIMIT 1);

DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;

CREATE INDEX runs_by_session ON runs (session_id, created_at);
-- Per-user concurrent-run limits count these.
CREATE INDEX runs_running_by_user ON runs (user_id) WHERE status = 'running';
-- One active run per session, whatever the application does.
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status = 'running';
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Start-up reads the runs a dead process left behind.
CREATE INDEX runs_unfinished ON runs (created_at) WHERE status IN ('queued', 'running');

-- The usage so far of a run that has not ended is the sum of its entries.
CREATE INDEX usage_by_run ON usage (run_id);

-- The event log of each run: what a client can replay after a disconnect or a restart.
CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE run_events;
DROP INDEX usage_by_run;
DROP INDEX runs_unfinished;
DROP INDEX runs_by_idempotency_key;
DROP INDEX runs_one_running_per_session;
DELETE FROM runs WHERE status = 'queued';
ALTER TABLE runs DROP COLUMN request;
ALTER TABLE runs DROP COLUMN request_hash;
ALTER TABLE runs DROP COLUMN idempotency_key;
ALTER TABLE runs DROP COLUMN started_at;
ALTER TABLE runs DROP COLUMN recovered_from;
