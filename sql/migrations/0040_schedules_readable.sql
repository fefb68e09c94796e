-- GET /stages and the dashboard show each periodic stage's last period, read from its
-- newest tick in the request's own role: the ticks name stages and periods, nothing of a
-- tenant's.
GRANT SELECT ON recurring_ticks TO skiplock_api;
