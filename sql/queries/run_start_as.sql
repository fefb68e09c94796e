-- Open a run's row under an id the run chose, so that trying again after a lost answer
-- cannot open a second row: the first attempt's row, if it committed, is kept.
INSERT INTO runs (id, trigger) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING
