-- Users' API keys, web UI sign-ins, and what accounting needs to count per key and cost.
-- A key's secret is never stored: hash is its SHA-256. Users have no table of their own: a user is
-- the name its keys (or a trusted proxy) give it, and the config holds their limits.

-- +goose Up
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    prefix     TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    admin      BOOLEAN NOT NULL DEFAULT FALSE,
    agents     TEXT NOT NULL DEFAULT '[]',
    limits     TEXT NOT NULL DEFAULT '{}',
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT
);

CREATE INDEX api_keys_by_user ON api_keys (user_id, created_at DESC);

-- A sign-in ends with its key: revoking or deleting the key deletes them.
CREATE TABLE auth_sessions (
    hash       BLOB PRIMARY KEY,
    key_id     TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE INDEX auth_sessions_by_key ON auth_sessions (key_id, created_at);
CREATE INDEX auth_sessions_by_expiry ON auth_sessions (expires_at);

ALTER TABLE runs ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
-- Per-key concurrent-run limits count these (runs_running_by_user counts the user's running ones).
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
CREATE INDEX runs_active_by_user ON runs (user_id) WHERE status IN ('running', 'queued');

ALTER TABLE usage ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN cost_nanousd BIGINT NOT NULL DEFAULT 0;
-- estimated: the provider reported no usage for the call (it was cut short, or the server does not
-- report it), so chatd counted it from what was sent and streamed.
ALTER TABLE usage ADD COLUMN estimated BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX usage_by_key_time ON usage (key_id, created_at);
CREATE INDEX usage_by_time ON usage (created_at);

-- +goose Down
DROP INDEX usage_by_time;
DROP INDEX usage_by_key_time;
ALTER TABLE usage DROP COLUMN estimated;
ALTER TABLE usage DROP COLUMN cost_nanousd;
ALTER TABLE usage DROP COLUMN key_id;
DROP INDEX runs_active_by_user;
DROP INDEX runs_active_by_key;
ALTER TABLE runs DROP COLUMN key_id;
DROP TABLE auth_sessions;
DROP TABLE api_keys;
