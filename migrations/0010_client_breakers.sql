-- retrylab schema, version 10: every client's breaker history survives a restart, not the
-- first client's alone.
--
-- One row per client whose breaker changed state (`client`, its place in the lab's list of
-- clients), its changes as JSON, written whole when it changes; and on the lab's row, how many
-- breakers stood in each state after each change (`breaker_shares`), which the page draws as
-- "3 of 200 open". The first client's history moves from the lab's row to its own; a store
-- written before this version had kept no other client's history, nor the shares.

CREATE TABLE client_breakers (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    client INTEGER NOT NULL,
    changes TEXT NOT NULL,
    PRIMARY KEY (lab_id, client)
) WITHOUT ROWID;

INSERT INTO client_breakers (lab_id, client, changes)
    SELECT id, 0, breaker_changes FROM labs WHERE breaker_changes != '[]';

ALTER TABLE labs DROP COLUMN breaker_changes;

ALTER TABLE labs ADD COLUMN breaker_shares TEXT NOT NULL DEFAULT '[]';
