-- Runs owned by leases, for several chatd instances on one database. The instance that creates or
-- starts a run writes its id (owner) and when its lease ends; it renews the leases of all its runs in one
-- UPDATE, well before they end. A run whose lease ended belongs to a process that died (or lost the
-- database): any instance claims it (FOR UPDATE SKIP LOCKED, so one does) and recovers it as start-up
-- recovery does. A run with no lease (created by a chatd alone on its database, or copied from SQLite)
-- counts as expired.
--
-- cancel_reason is a cancel asked on an instance that does not own the run: the owner reads it when a
-- notification wakes it, or at its next renewal.

-- +goose Up
ALTER TABLE runs ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN lease_expires_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN cancel_reason TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_unfinished_by_owner ON runs (owner) WHERE status IN ('queued', 'running');

-- +goose Down
DROP INDEX runs_unfinished_by_owner;
ALTER TABLE runs DROP COLUMN cancel_reason;
ALTER TABLE runs DROP COLUMN lease_expires_at;
ALTER TABLE runs DROP COLUMN owner;
