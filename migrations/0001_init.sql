-- retrylab schema, version 1: labs, their messages (each with every attempt, as JSON), dead
-- letters and the downstream's applied idempotency keys with their stored responses.

CREATE TABLE labs (
    id TEXT PRIMARY KEY,
    origin_unix_ms INTEGER NOT NULL,
    active_unix_ms INTEGER NOT NULL,
    downstream TEXT NOT NULL,
    policy TEXT NOT NULL,
    requests INTEGER NOT NULL,
    applied INTEGER NOT NULL,
    applied_twice INTEGER NOT NULL,
    next_message_id INTEGER NOT NULL,
    last_event_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL
);

CREATE TABLE messages (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    id INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (lab_id, id)
) WITHOUT ROWID;

CREATE TABLE dead_letters (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    message_id INTEGER NOT NULL,
    dead_lettered_unix_ms INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (lab_id, message_id)
) WITHOUT ROWID;

CREATE TABLE idempotency_keys (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    request_body TEXT NOT NULL,
    status INTEGER NOT NULL,
    response BLOB NOT NULL,
    applied INTEGER NOT NULL,
    applied_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (lab_id, key)
) WITHOUT ROWID;
