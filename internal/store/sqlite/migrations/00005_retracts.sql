-- A regeneration marker (role system) retracts the answer to the user record named here: the records
-- after that one and before the marker are left out of what the model is sent and of the chat UI's
-- history, and stay stored. NULL for every other record.

-- +goose Up
ALTER TABLE records ADD COLUMN retracts TEXT;

-- +goose Down
ALTER TABLE records DROP COLUMN retracts;
