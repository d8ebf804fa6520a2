-- retrylab schema, version 12: a key is found by its name only in a lab that needs it.
--
-- The index by name (version 11) serves one lookup: a key the lab no longer holds in memory
-- because it went past --cold-keys-per-lab. Yet every new key paid for it: each landed on a
-- random leaf of that index, a page written to the WAL per key. Now a row is `named` only once
-- its lab may let keys go, and the index holds only named rows. A lab names all of its rows in
-- the commit before it lets its first key go, so every row a lookup may need is in the index.
-- Rows from before are named, as they were all indexed.

ALTER TABLE idempotency_keys ADD COLUMN named INTEGER NOT NULL DEFAULT 1;

DROP INDEX idempotency_keys_by_name;

CREATE INDEX idempotency_keys_by_name ON idempotency_keys (lab_id, key) WHERE named = 1;
