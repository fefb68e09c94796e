-- jobs_due_idx (the dashboard's open jobs per type, migration 0052) is kept out of the
-- claim's reach. Its predicate now also says run_after IS NOT NULL: always true (the
-- column is NOT NULL), but the planner can use the index only for a query whose own
-- conditions prove it, and only a strict comparison of run_after does (the dashboard's
-- run_after <= now() and run_after > now()). The claim's probes test readiness as
-- (run_after <= now()) IS TRUE, which proves nothing about NULLs, so they can only be
-- served by jobs_claim_idx. With the old predicate the planner, given statistics taken
-- before the table filled, walked this index for the lanes' head probes: every ready job
-- of the type, filtered by lane (0.3 s a claim, seen in the horizon soak).
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (type, run_after) WITH (deduplicate_items = off)
    WHERE status = 'pending' AND run_after IS NOT NULL;
