-- The calls of a session that still hold their request body: FinishRun drops the bodies of the
-- session's older runs (store.RunEnd.KeepRequests) by reading these few rows, not all of its calls.

-- +goose Up
CREATE INDEX model_calls_with_request ON model_calls (session_id) WHERE request IS NOT NULL;

-- +goose Down
DROP INDEX model_calls_with_request;
