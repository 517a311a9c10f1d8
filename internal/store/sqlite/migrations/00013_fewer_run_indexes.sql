-- Fewer indexes on runs: every index a run is in is one more B-tree page a new chat writes to the WAL,
-- and syncs, before its first token (and again when the run ends and leaves the partial ones). A new
-- chat wrote 15 pages, 8 of them for runs; now 12 and 5.
--
-- runs_running_by_user: no query reads it any more (the quotas count through runs_active_by_user).
-- runs_unfinished: the unfinished runs, read once at start-up, are the rows of runs_active_by_user
-- too (the same condition); a scan of that partial index finds them.
-- runs_active_by_key: a key's active runs are counted among its user's (key_id = $1 AND user_id = $2),
-- which runs_active_by_user finds: the few runs one user has running or queued.

-- +goose Up
DROP INDEX runs_running_by_user;
DROP INDEX runs_unfinished;
DROP INDEX runs_active_by_key;

-- +goose Down
CREATE INDEX runs_running_by_user ON runs (user_id) WHERE status = 'running';
CREATE INDEX runs_unfinished ON runs (created_at) WHERE status IN ('queued', 'running');
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
