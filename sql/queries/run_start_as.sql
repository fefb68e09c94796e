-- Open a run's row under an id the run chose, so that trying again after a lost answer
-- cannot open a second row: the first attempt's row, if it committed, is kept.
INSERT INTO runs (id, trigger) VALUES (:run_id, :trigger)
ON CONFLICT (id) DO NOTHING
