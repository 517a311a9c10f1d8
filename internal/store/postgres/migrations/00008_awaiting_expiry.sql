-- When a run awaiting approval expires (awaiting_expires_at), so that every instance's sweep can find
-- the runs whose expiry passed while no instance that keeps their timer was running. It is set when a
-- run starts to wait; the runs already waiting get theirs from what they wait for (awaiting, JSON that
-- chatd wrote, whose expires_at is an RFC 3339 time). chatd migrate sets it the same way for the runs
-- it copies.

-- +goose Up
ALTER TABLE runs ADD COLUMN awaiting_expires_at TIMESTAMPTZ;
CREATE INDEX runs_awaiting_expiry ON runs (awaiting_expires_at) WHERE status = 'awaiting_approval';
UPDATE runs SET awaiting_expires_at = (awaiting::jsonb ->> 'expires_at')::timestamptz
WHERE status = 'awaiting_approval' AND awaiting_expires_at IS NULL;

-- +goose Down
DROP INDEX runs_awaiting_expiry;
ALTER TABLE runs DROP COLUMN awaiting_expires_at;
