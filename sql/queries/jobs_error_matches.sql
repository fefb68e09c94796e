-- GET /jobs?error= for an admin: the jobs whose last_error holds :error (any case), at most
-- :cap + 1 of them, found off the trigram index (migration 0066). More than :cap: a common
-- text, which the page finds walking the errors newest first instead.
SELECT array(SELECT app_error_matches(:error::text, :cap::int + 1)) AS ids
