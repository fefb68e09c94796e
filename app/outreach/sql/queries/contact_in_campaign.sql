-- Whether contact :contact_id is campaign :campaign_id's: asked where people enqueue a job naming it
-- (app/outreach/scope.py). Over the API it runs as the tenant, so another tenant's
-- contact is not found either.
SELECT EXISTS (SELECT 1 FROM contacts WHERE id = :contact_id AND campaign_id = :campaign_id)
