-- The trace context of whatever enqueued a job: a W3C traceparent
-- ("00-<trace id>-<span id>-<flags>"), or NULL. Written at enqueue from the enqueuer's
-- current OpenTelemetry span; the claim returns it, and the job's span links to it
-- (docs/traces.md). Plain SQL enqueues may set it too. A nullable column
-- without a default: adding it rewrites no row.
ALTER TABLE jobs ADD COLUMN trace_context text;
