-- Start a deadline and the job that checks it when it falls due, in one statement.
WITH d AS (
    INSERT INTO deadlines (subject, due_at) VALUES (:subject, :due_at) RETURNING id, due_at
)
INSERT INTO jobs (type, payload, dedupe_key, run_after)
SELECT 'deadline', jsonb_build_object('deadline_id', d.id), 'deadline:' || d.id, d.due_at FROM d
RETURNING (payload ->> 'deadline_id')::uuid AS id
