-- Lock owner :owner_id's row until the transaction ends, so that campaign creations for one
-- owner count their campaigns one after the other (usage_owner_campaigns.sql, run as a
-- separate statement after this one: its fresh snapshot sees the campaign a creation that
-- held the lock before committed).
SELECT id FROM users WHERE id = :owner_id FOR NO KEY UPDATE
