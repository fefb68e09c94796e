-- Roll the closed minutes' endings up (app_roll_up_endings, migration 0055) before a read
-- of the last day's endings: a no-op but for a minute or so since the last call.
SELECT app_roll_up_endings()
