-- The lane's id if the caller can see it (under row-level security: a tenant, its own;
-- an admin, any).
SELECT id FROM lanes WHERE id = :lane
