-- retrylab schema, version 8: steady traffic and a window over settled messages.
--
-- A lab's steady traffic (its rate, arrivals and end, as JSON; 'null' when none runs), so it
-- resumes after a restart; and how many delivered messages left the window of settled
-- messages (their rows are deleted; the count keeps the `delivered` counter right).

ALTER TABLE labs ADD COLUMN traffic TEXT NOT NULL DEFAULT 'null';

ALTER TABLE labs ADD COLUMN forgotten_delivered INTEGER NOT NULL DEFAULT 0;
