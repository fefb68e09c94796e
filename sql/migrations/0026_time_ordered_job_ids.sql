-- New jobs get time-ordered ids (UUID version 7, RFC 9562), and GET /jobs pages over the
-- id alone, so jobs_listing_idx goes (docs/performance.md#time-ordered-job-ids).
--
-- Why: a status change is never a HOT update (partial indexes depend on the status), so
-- every claim and every ending adds an entry to each index of jobs. The listing's
-- (created_at, id) index was one of them, there only to page newest first. With ids that
-- grow with time the primary key pages the same way, and its new entries land at its
-- right edge instead of on random pages. Measured on one connection: 17% less server CPU
-- per job for one lane's batch of 50, 8% for a mixed batch of 25.
--
-- Layout: 48 bits of Unix milliseconds, the version (7), 12 bits of the millisecond's
-- fraction (RFC 9562's method 3: ids ascend to the microsecond of clock_timestamp()),
-- the variant, 62 random bits. Jobs created before this migration keep their random ids
-- (clients hold them): most sort above every new id, so the list shows them first until
-- pruning or finishing takes them away (docs/queue.md#job-ids).

CREATE FUNCTION time_ordered_uuid() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(m / 1000) FROM 3)                              -- 48-bit ms
                  || int2send((28672 + (m % 1000) * 4096 / 1000)::smallint)         -- 0x7 + fraction
                  || substring(uuid_send(gen_random_uuid()) FROM 9),                -- variant + random
                  'hex')::uuid
    FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS m) t
$$;

ALTER TABLE jobs ALTER COLUMN id SET DEFAULT time_ordered_uuid();
DROP INDEX jobs_listing_idx;
