-- A new active campaign for owner $1, named $2, on site $3.
INSERT INTO campaigns (user_id, name, url) VALUES ($1, $2, $3)
RETURNING id, user_id, name, url, status, created_at
