-- Where the owner of lane :lane wants notifications (NULL: nobody's lane, or no URL set).
SELECT u.webhook_url FROM lanes l JOIN users u ON u.id = l.owner_id WHERE l.id = :lane
