-- Generated titles and durable diagnostics.
--
-- title_set says the user chose the session's title (created with one, or renamed): a title chatd
-- generates from the first exchange replaces only a title the user did not set, checked in the update.
--
-- model_calls keeps what each model call of a run was sent and what it answered, for the run's
-- diagnostics (GET /v1/runs/{id}/diagnostics): the system prompt (NULL: the call before's), the tool
-- names, the settings, the request body as the provider encoded it (gzip; NULL when over the limit, and
-- request_omitted says why) and the model's raw output. It is deleted with its run, and so with its
-- session.

-- +goose Up
ALTER TABLE sessions ADD COLUMN title_set BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE model_calls (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    n               INTEGER NOT NULL,
    session_id      TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    model           TEXT NOT NULL DEFAULT '',
    system          TEXT,
    tools           TEXT NOT NULL DEFAULT '[]',
    settings        TEXT NOT NULL DEFAULT '{}',
    request         BLOB,
    request_omitted TEXT NOT NULL DEFAULT '',
    output          TEXT,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (run_id, n)
);

-- +goose Down
DROP TABLE model_calls;
ALTER TABLE sessions DROP COLUMN title_set;
