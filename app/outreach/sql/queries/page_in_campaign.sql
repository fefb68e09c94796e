-- Whether page $1 is campaign $2's: asked where people enqueue a job naming it
-- (app/outreach/scope.py). Over the API it runs as the tenant, so another tenant's page
-- is not found either.
SELECT EXISTS (SELECT 1 FROM pages WHERE id = $1 AND campaign_id = $2)
