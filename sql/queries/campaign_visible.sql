SELECT id FROM campaigns WHERE id = $1
