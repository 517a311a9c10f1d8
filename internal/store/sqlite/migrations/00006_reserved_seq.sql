-- The Seq up to which a run's events may have reached a client (store.Run.ReservedSeq): the process
-- that runs the run raises it, in the event log's own transactions, before it lets a reader see an
-- event past it. A crash loses at most the events up to it, so recovery numbers its events after it and
-- an id a client saw never names another event. 0 for the runs stored before it was kept.

-- +goose Up
ALTER TABLE runs ADD COLUMN reserved_seq BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE runs DROP COLUMN reserved_seq;
