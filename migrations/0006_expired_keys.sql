-- retrylab schema, version 6: a key that leaves the dedup window is remembered, not deleted.
--
-- Its row stays, marked expired and without its answer: a repeat of the key is a new request,
-- as the window promises, but the ledger still knows the write was applied once, so applying
-- it again counts in `applied_twice`. Expired rows are deleted with their lab (or a reset).

ALTER TABLE idempotency_keys ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
