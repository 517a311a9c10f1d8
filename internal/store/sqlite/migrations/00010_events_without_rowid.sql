-- The event log keyed by (run_id, seq) alone: a WITHOUT ROWID table is one B-tree where the table with
-- a rowid was two (the rows, and the index its primary key made), so each event is one insert instead of
-- two and its run id is stored once instead of twice. The event log writes an event per token.
-- (Numbered 00010: 00008 and 00009 were taken by work in progress when this was written.)

-- +goose Up
CREATE TABLE run_events_keyed (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO run_events_keyed (run_id, seq, type, data) SELECT run_id, seq, type, data FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_keyed RENAME TO run_events;

-- +goose Down
CREATE TABLE run_events_rowid (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    type   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
INSERT INTO run_events_rowid (run_id, seq, type, data) SELECT run_id, seq, type, data FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_rowid RENAME TO run_events;
