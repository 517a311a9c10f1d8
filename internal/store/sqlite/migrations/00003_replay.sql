-- What a provider needs back verbatim from the assistant turns it wrote: thinking signatures, redacted
-- thinking, Gemini thought signatures, OpenAI Responses reasoning items. JSON (store.Replay), NULL for
-- most records. Clients never see it.

-- +goose Up
ALTER TABLE records ADD COLUMN replay TEXT;

-- +goose Down
ALTER TABLE records DROP COLUMN replay;
