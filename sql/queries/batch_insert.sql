INSERT INTO batches (lane) VALUES (:lane) RETURNING id
