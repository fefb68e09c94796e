-- Spend $3 units of the share of today's (UTC) shared quota that campaign $1's owner may
-- use, $2 units a day. Atomic like quota_spend.sql: the WHERE keeps `spent` at or under
-- the share however many of the owner's jobs spend at once. One row back: `owner` NULL
-- when the campaign has none (the operator's work: no share applies), `spent` NULL when
-- the owner's share for today is used up (nothing taken).
WITH owner AS (
    SELECT user_id FROM campaigns WHERE id = $1
), spend AS (
    INSERT INTO quota_user_ledger AS q (user_id, day, spent)
    SELECT user_id, (now() AT TIME ZONE 'UTC')::date, $3::int FROM owner
    WHERE user_id IS NOT NULL AND $3::int <= $2::int
    ON CONFLICT (user_id, day) DO UPDATE
    SET spent = q.spent + excluded.spent
    WHERE q.spent + excluded.spent <= $2::int
    RETURNING q.spent
)
SELECT (SELECT user_id FROM owner) AS owner, (SELECT spent FROM spend) AS spent
