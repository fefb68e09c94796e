-- How many campaigns owner :owner_id has (counted under usage_owner_lock.sql's lock).
SELECT count(*)::int FROM campaigns WHERE user_id = :owner_id
