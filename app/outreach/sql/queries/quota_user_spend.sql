-- Spend :units units of the share of today's (UTC) shared quota that campaign :campaign_id's owner may
-- use, :share units a day. Atomic like quota_spend.sql: the WHERE keeps `spent` at or under
-- the share however many of the owner's jobs spend at once. One row back: `owner` NULL
-- when the campaign has none (the operator's work: no share applies), `spent` NULL when
-- the owner's share for today is used up (nothing taken).
WITH owner AS (
    SELECT user_id FROM campaigns WHERE id = :campaign_id
), spend AS (
    INSERT INTO quota_user_ledger AS q (user_id, day, spent)
    SELECT user_id, (now() AT TIME ZONE 'UTC')::date, :units::int FROM owner
    WHERE user_id IS NOT NULL AND :units::int <= :share::int
    ON CONFLICT (user_id, day) DO UPDATE
    SET spent = q.spent + excluded.spent
    WHERE q.spent + excluded.spent <= :share::int
    RETURNING q.spent
)
SELECT (SELECT user_id FROM owner) AS owner, (SELECT spent FROM spend) AS spent
