-- The due-time example (app/outreach/deadlines.py): an SLA-style deadline whose breach is
-- latched exactly once, by a job that becomes due at the deadline.
CREATE TABLE deadlines (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subject      text NOT NULL,           -- what the promise is about, e.g. "ticket:123"
    due_at       timestamptz NOT NULL,
    resolved_at  timestamptz,             -- kept in time: the breach never fires
    breached_at  timestamptz,             -- set once, by whichever run gets there first
    created_at   timestamptz NOT NULL DEFAULT now()
);
