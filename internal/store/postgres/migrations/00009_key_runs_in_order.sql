-- runs_active_by_key holds a key's active runs in the order a revoke reads them (ActiveRunsOfKey: by
-- status, then id, from where a page starts): on (key_id) alone, every page read and sorted all the
-- key's active runs, so that a revoke of a key with many read them many times over. It replaces the
-- index on (key_id) rather than joining it: the concurrent-run counts by key_id use its first column,
-- and a run is still written to as many indexes.

-- +goose Up
DROP INDEX runs_active_by_key;
CREATE INDEX runs_active_by_key ON runs (key_id, status, id) WHERE status IN ('running', 'queued');

-- +goose Down
DROP INDEX runs_active_by_key;
CREATE INDEX runs_active_by_key ON runs (key_id) WHERE status IN ('running', 'queued');
