-- A summary record (role system) replaces, in what the model is sent, every record of its session up to
-- and including the record named here: chatd writes one when a conversation nears the model's context
-- window. The records it summarizes stay stored and visible. NULL for every other record.

-- +goose Up
ALTER TABLE records ADD COLUMN summary_through TEXT;

-- +goose Down
ALTER TABLE records DROP COLUMN summary_through;
