-- A campaign's status no longer lifts an operator's hold on its lane (lanes.held, the
-- queue's migration 0028): pausing and resuming a campaign sets its lane's paused flag to
-- the campaign's status OR the hold. Before, a tenant whose lane an operator had paused
-- (PATCH /lanes/{id}) could pause and resume its own campaign and be claimed again.
CREATE OR REPLACE FUNCTION outreach_rank_lanes(ids uuid[], rank_owner boolean, rank_paused boolean)
RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM lanes l WHERE l.id = ANY (ids) ORDER BY l.id FOR NO KEY UPDATE;
    UPDATE lanes l
    SET owner_id = CASE WHEN rank_owner THEN r.owner_id ELSE l.owner_id END,
        priority = CASE WHEN rank_owner THEN r.priority ELSE l.priority END,
        paused = CASE WHEN rank_paused THEN r.paused OR l.held ELSE l.paused END
    FROM outreach_lane_ranks(ids) r
    WHERE l.id = r.id
      AND ((rank_owner AND (l.owner_id, l.priority) IS DISTINCT FROM (r.owner_id, r.priority))
           OR (rank_paused AND l.paused IS DISTINCT FROM (r.paused OR l.held)));
END $$;
REVOKE EXECUTE ON FUNCTION outreach_rank_lanes(uuid[], boolean, boolean) FROM PUBLIC;
