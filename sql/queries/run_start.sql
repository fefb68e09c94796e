INSERT INTO runs (trigger) VALUES (:trigger) RETURNING id, started_at
