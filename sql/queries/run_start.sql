INSERT INTO runs (trigger) VALUES ($1) RETURNING id, started_at
