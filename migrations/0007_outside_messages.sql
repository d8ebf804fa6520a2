-- retrylab schema, version 7: what the endpoint observed of outside callers survives a restart.
--
-- One row per outside message (the requests one caller sent with one Idempotency-Key), its
-- caller, key and every attempt as JSON, rewritten while the key is in use.

CREATE TABLE outside_messages (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    id INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (lab_id, id)
) WITHOUT ROWID;
