-- retrylab schema, version 2: comparisons of retry policies. Each row is one comparison's
-- settings and the labs it runs in, as JSON; the labs hold everything measured.

CREATE TABLE comparisons (
    id TEXT PRIMARY KEY,
    created_unix_ms INTEGER NOT NULL,
    body TEXT NOT NULL
);
