SELECT id, url, name, status FROM campaigns WHERE id = $1
