-- An operator pauses stage $1 for every lane; pausing a paused stage keeps its time.
INSERT INTO paused_stages (type) VALUES ($1)
ON CONFLICT (type) DO NOTHING
