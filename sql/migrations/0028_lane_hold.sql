-- An operator's pause is a hold: PATCH /lanes/{id} {"paused": true} sets `held` with
-- `paused`, and only an operator's resume ({"paused": false}) lifts it. A plug-in that
-- ranks lanes from its own data (the outreach example pauses a campaign's lane with the
-- campaign) keeps a held lane paused, so a tenant who pauses and resumes its own campaign
-- no longer lifts the pause an operator put on its lane. The claim still reads `paused`
-- only: a held lane is always a paused one.
ALTER TABLE lanes ADD COLUMN held boolean NOT NULL DEFAULT false;
GRANT UPDATE (held) ON lanes TO skiplock_admin;
