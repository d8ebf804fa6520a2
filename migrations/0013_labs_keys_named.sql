-- retrylab schema, version 13: a lab remembers that its key rows are named.
--
-- A lab past --cold-keys-per-lab names every key row of its own in one commit (version 12)
-- before it lets a key go from memory. Until now it forgot that it had: after a restart or a
-- wake from rest, such a lab named its rows again, a scan of all of them on the writer. The
-- flag is set in the commit that names them, and cleared when a reset deletes them. Labs from
-- before start unnamed, as they did: they name their rows once more, then remember it.

ALTER TABLE labs ADD COLUMN keys_named INTEGER NOT NULL DEFAULT 0;
