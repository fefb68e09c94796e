SELECT status FROM campaigns WHERE id = $1
