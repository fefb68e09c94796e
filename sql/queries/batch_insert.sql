INSERT INTO batches (campaign_id) VALUES ($1) RETURNING id
