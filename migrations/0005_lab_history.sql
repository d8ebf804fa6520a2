-- retrylab schema, version 5: what a lab measured and marked survives a restart.
--
-- The load chart's bins (one row per 100 ms of the lab's time, rewritten while the bin fills),
-- and the markers and the breaker's changes of state (each a short list, capped in the lab,
-- written whole when it changes).

CREATE TABLE load_bins (
    lab_id TEXT NOT NULL REFERENCES labs (id) ON DELETE CASCADE,
    t_ms INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (lab_id, t_ms)
) WITHOUT ROWID;

ALTER TABLE labs ADD COLUMN markers TEXT NOT NULL DEFAULT '[]';

ALTER TABLE labs ADD COLUMN breaker_changes TEXT NOT NULL DEFAULT '[]';
