INSERT INTO batches (lane) VALUES ($1) RETURNING id
