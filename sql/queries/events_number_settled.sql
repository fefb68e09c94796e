-- Number what the pipeline parked as settled (migration 0032): one 'jobs.settled' per lane
-- and type for what up to 2,000 parked statements add up to; how many events that wrote.
SELECT events_number_settled()
