-- retrylab schema, version 11: an applied key can be found by its name alone.
--
-- A lab holds at most --cold-keys-per-lab older keys in memory, by fingerprint; a request whose
-- key is not among them, in a lab that has let older ones go, is looked up here by name.
CREATE INDEX idempotency_keys_by_name ON idempotency_keys (lab_id, key);
