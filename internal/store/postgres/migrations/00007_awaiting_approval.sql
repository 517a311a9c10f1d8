-- Runs that wait for a person: the status awaiting_approval, and what such a run waits for (awaiting, a
-- JSON object the chat layer owns, kept as text so that a write can compare it byte for byte). An
-- awaiting run holds its session as a running run does (the unique index covers both), but it holds no
-- lease: no instance runs it, and a sweep does not recover it. A decision resumes it on whichever
-- instance receives it.
-- (Numbered 00007: 00004–00006 were taken when it was merged.)

-- +goose Up
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'awaiting_approval', 'completed', 'failed', 'cancelled', 'max_iterations', 'interrupted'));
ALTER TABLE runs ADD COLUMN awaiting TEXT;
DROP INDEX runs_one_running_per_session;
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status IN ('running', 'awaiting_approval');
CREATE INDEX runs_awaiting ON runs (created_at) WHERE status = 'awaiting_approval';

-- +goose Down
UPDATE runs SET status = 'interrupted', error = 'chatd was downgraded while the run waited for approval',
    ended_at = now(), request = NULL
WHERE status = 'awaiting_approval';
DROP INDEX runs_awaiting;
DROP INDEX runs_one_running_per_session;
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status = 'running';
ALTER TABLE runs DROP COLUMN awaiting;
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'completed', 'failed', 'cancelled', 'max_iterations', 'interrupted'));
