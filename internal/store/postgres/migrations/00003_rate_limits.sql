-- Requests-per-minute limits counted by the database, so that the instances on it share one count per
-- caller (store.RateLimits). One row per caller that asked lately: tat is the theoretical arrival time
-- of its next request (the generic cell rate algorithm), on the database's clock; counted says whether
-- its last request was counted, because the statement that asks returns only the row as it wrote it. A
-- row whose tat has passed says no more than a missing one (the caller's whole allowance is back), so
-- sweeps delete those.

-- +goose Up
CREATE TABLE rate_limits (
    key     TEXT COLLATE "C" PRIMARY KEY,
    tat     TIMESTAMPTZ NOT NULL,
    counted BOOLEAN NOT NULL
);

-- +goose Down
DROP TABLE rate_limits;
