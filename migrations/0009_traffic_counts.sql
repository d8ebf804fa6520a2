-- retrylab schema, version 9: what the steady traffic did, kept across restarts.
--
-- How many new messages the lab's traffic created and how many of its arrivals were refused
-- at the source, so `traffic.sent` and `traffic.refused` carry on after a restart instead of
-- starting again from 0. A store written before this version reads them as 0.

ALTER TABLE labs ADD COLUMN traffic_sent INTEGER NOT NULL DEFAULT 0;

ALTER TABLE labs ADD COLUMN traffic_refused INTEGER NOT NULL DEFAULT 0;
