-- What user :user_id spent today (UTC) of their share of the shared quota.
SELECT coalesce((SELECT spent FROM quota_user_ledger
                 WHERE user_id = :user_id AND day = (now() AT TIME ZONE 'UTC')::date), 0) AS spent
