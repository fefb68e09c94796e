-- Runs not finished yet, per trigger (their own partial index).
SELECT trigger, count(*) AS runs FROM runs WHERE finished_at IS NULL GROUP BY trigger
