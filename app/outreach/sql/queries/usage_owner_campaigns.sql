-- How many campaigns owner $1 has (counted under usage_owner_lock.sql's lock).
SELECT count(*)::int FROM campaigns WHERE user_id = $1
