-- What chatd took out of an assistant record's text (store.Record's SuggestedValues, SuggestedActions,
-- Payloads and RawContent), as one JSON object; NULL when the text carried no marked block.

-- +goose Up
ALTER TABLE records ADD COLUMN parsed TEXT;

-- +goose Down
ALTER TABLE records DROP COLUMN parsed;
