-- When a run awaiting approval expires (awaiting_expires_at), so that every instance's sweep can find
-- the runs whose expiry passed while no instance that keeps their timer was running. It is set when a
-- run starts to wait; the runs already waiting get theirs from what they wait for (awaiting's
-- expires_at), as chatd migrate does for the runs it copies (awaiting_expiry). A run whose awaiting
-- cannot be read gets its creation time: the sweep finds it, and its expiry ends it.

-- +goose Up
ALTER TABLE runs ADD COLUMN awaiting_expires_at TIMESTAMPTZ;
CREATE INDEX runs_awaiting_expiry ON runs (awaiting_expires_at) WHERE status = 'awaiting_approval';

-- +goose StatementBegin
CREATE FUNCTION awaiting_expiry(awaiting TEXT, fallback TIMESTAMPTZ) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN COALESCE((awaiting::jsonb ->> 'expires_at')::timestamptz, fallback);
EXCEPTION WHEN others THEN
    RETURN fallback;
END
$$;
-- +goose StatementEnd

UPDATE runs SET awaiting_expires_at = awaiting_expiry(awaiting, created_at)
WHERE status = 'awaiting_approval' AND awaiting_expires_at IS NULL;

-- +goose Down
DROP FUNCTION awaiting_expiry(TEXT, TIMESTAMPTZ);
DROP INDEX runs_awaiting_expiry;
ALTER TABLE runs DROP COLUMN awaiting_expires_at;
