-- A campaign's id is its lane's, and outreach_campaigns_inserted (SECURITY DEFINER) gives
-- the lane with that id to the campaign's owner, ON CONFLICT included. With INSERT and
-- UPDATE on every column, a tenant's own SQL (injected into a request, even on the tenant
-- login) could name an existing lane as a new campaign's id and own it, the all-zero lane
-- of the operator's work included (maintenance, ownerless work), or move a campaign onto
-- it and delete it, deleting the lane's jobs. The API never names a campaign's id: the
-- database draws it, so the API roles may write every column but that one.
REVOKE INSERT, UPDATE ON campaigns FROM skiplock_api;
GRANT INSERT (user_id, name, url, status, created_at, duplicate),
      UPDATE (user_id, name, url, status, created_at, duplicate) ON campaigns TO skiplock_api;
