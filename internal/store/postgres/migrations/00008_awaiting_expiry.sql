-- When a run awaiting approval expires (awaiting_expires_at), so that every instance's sweep can find
-- the runs whose expiry passed while no instance that keeps their timer was running. It is set when a
-- run starts to wait; runs waiting before this migration have none, and are expired by the timers every
-- instance keeps from its start.

-- +goose Up
ALTER TABLE runs ADD COLUMN awaiting_expires_at TIMESTAMPTZ;
CREATE INDEX runs_awaiting_expiry ON runs (awaiting_expires_at) WHERE status = 'awaiting_approval';

-- +goose Down
DROP INDEX runs_awaiting_expiry;
ALTER TABLE runs DROP COLUMN awaiting_expires_at;
