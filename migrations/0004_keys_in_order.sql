-- retrylab schema, version 4: applied keys are kept in the order they were applied.
--
-- Keyed by (lab, key), every new key landed on a random leaf of the table's B-tree, so a commit
-- of 40 new keys wrote about 100 pages to the WAL. Appended in order, they fill a few. The
-- store never looks a key up by name: the ledger in memory does that; the store reads a lab's
-- keys back at start-up and deletes the expired ones by time, which the index serves. A key
-- written twice has two rows, and the later one (the higher rowid) is the one that counts.

CREATE TABLE keys_in_order (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    request_body TEXT NOT NULL,
    status INTEGER NOT NULL,
    response BLOB NOT NULL,
    applied INTEGER NOT NULL,
    applied_unix_ms INTEGER NOT NULL,
    outside INTEGER NOT NULL DEFAULT 0
);

INSERT INTO keys_in_order (lab_id, key, request_body, status, response, applied, applied_unix_ms, outside)
    SELECT lab_id, key, request_body, status, response, applied, applied_unix_ms, outside
    FROM idempotency_keys ORDER BY lab_id, applied_unix_ms;

DROP TABLE idempotency_keys;

ALTER TABLE keys_in_order RENAME TO idempotency_keys;

CREATE INDEX idempotency_keys_by_time ON idempotency_keys (lab_id, applied_unix_ms);
