SELECT u.webhook_url FROM campaigns c JOIN users u ON u.id = c.user_id WHERE c.id = $1
