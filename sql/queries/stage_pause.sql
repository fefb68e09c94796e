-- An operator pauses stage :type for every lane; pausing a paused stage keeps its time.
INSERT INTO paused_stages (type) VALUES (:type)
ON CONFLICT (type) DO NOTHING
