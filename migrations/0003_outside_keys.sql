-- retrylab schema, version 3: an idempotency key remembers whether an outside caller made it
-- (those count against the limits on outside keys), and `request_body` now holds the body's
-- SHA-256 (`sha256:` and hex) instead of the body; rows from before keep their body, read back
-- as its digest.

ALTER TABLE idempotency_keys ADD COLUMN outside INTEGER NOT NULL DEFAULT 0;
