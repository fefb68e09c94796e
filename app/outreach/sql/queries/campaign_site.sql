SELECT id, url, name, status FROM campaigns WHERE id = :campaign_id
