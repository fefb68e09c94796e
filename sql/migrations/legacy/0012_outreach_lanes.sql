-- The outreach example ranks the queue's lanes. A campaign's lane (lanes.id = the
-- campaign's id) runs at its owner's plan priority (subscriptions.plan; an owner without
-- a subscription is on DEFAULT_PLAN 'free') and is paused while the campaign is; work
-- with no owner (the all-zero lane, a campaign without owner) runs as OWNERLESS_PLAN
-- 'standard' (app/outreach/plans.py). Triggers on campaigns, subscriptions and lanes
-- keep it so whoever makes the change (the API, the CLI, psql); the queue's own
-- triggers (0010) copy it on to the claim's index.

-- PLANS' priorities, for SQL. A view of constants rather than a table: nothing can
-- empty or edit it short of a migration, which is also what changing PLANS takes (with a
-- re-rank: outreach_rank_lanes over every lane). A test fails if it drifts from PLANS.
CREATE VIEW plan_priorities (plan, priority) AS
VALUES ('free', 1), ('standard', 2), ('pro', 3);

-- The ranking each of these lanes should have now.
CREATE FUNCTION outreach_lane_ranks(ids uuid[])
RETURNS TABLE (id uuid, owner_id uuid, priority integer, paused boolean)
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT x.id, c.user_id,
           CASE WHEN c.user_id IS NULL  -- not a campaign, or nobody's: OWNERLESS_PLAN
                THEN (SELECT p.priority FROM plan_priorities p WHERE p.plan = 'standard')
                ELSE coalesce((SELECT p.priority FROM plan_priorities p WHERE p.plan = s.plan),
                              -- no subscription (or a plan no longer sold): DEFAULT_PLAN
                              (SELECT p.priority FROM plan_priorities p WHERE p.plan = 'free'))
           END,
           coalesce(c.status = 'paused', false)
    FROM unnest(ids) AS x(id)
    LEFT JOIN campaigns c ON c.id = x.id
    LEFT JOIN subscriptions s ON s.user_id = c.user_id
$$;

-- Set these lanes' ranking from the campaigns and plans, all of it or only the part
-- that depends on what changed: a status change and a plan change committing at the
-- same time each write their own column, so neither undoes the other.
CREATE FUNCTION outreach_rank_lanes(ids uuid[], rank_owner boolean, rank_paused boolean)
RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM lanes l WHERE l.id = ANY (ids) ORDER BY l.id FOR NO KEY UPDATE;
    UPDATE lanes l
    SET owner_id = CASE WHEN rank_owner THEN r.owner_id ELSE l.owner_id END,
        priority = CASE WHEN rank_owner THEN r.priority ELSE l.priority END,
        paused = CASE WHEN rank_paused THEN r.paused ELSE l.paused END
    FROM outreach_lane_ranks(ids) r
    WHERE l.id = r.id
      AND ((rank_owner AND (l.owner_id, l.priority) IS DISTINCT FROM (r.owner_id, r.priority))
           OR (rank_paused AND l.paused IS DISTINCT FROM r.paused));
END $$;
REVOKE EXECUTE ON FUNCTION outreach_rank_lanes(uuid[], boolean, boolean) FROM PUBLIC;

-- Every lane ranked now: the campaigns' (made when missing) and the others (ownerless).
INSERT INTO lanes AS l (id, owner_id, priority, paused)
SELECT r.id, r.owner_id, r.priority, r.paused
FROM outreach_lane_ranks(ARRAY(SELECT id FROM campaigns UNION SELECT id FROM lanes)) r
ORDER BY r.id
ON CONFLICT (id) DO UPDATE
    SET owner_id = excluded.owner_id, priority = excluded.priority, paused = excluded.paused
    WHERE (l.owner_id, l.priority, l.paused)
          IS DISTINCT FROM (excluded.owner_id, excluded.priority, excluded.paused);

-- The triggers run as their owner: the API's role changes campaigns but has no rights
-- on lanes.

-- A lane the queue made on its own (its first job came before any ranking, e.g. the
-- ownerless lane) is ranked as soon as it exists. (A campaign's lane comes ranked.)
CREATE FUNCTION outreach_lanes_made() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT r.id FROM outreach_lane_ranks(ARRAY(SELECT id FROM new_lanes)) r
        JOIN new_lanes n ON n.id = r.id
        WHERE (n.owner_id, n.priority, n.paused) IS DISTINCT FROM (r.owner_id, r.priority, r.paused)),
        true, true);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_rank AFTER INSERT ON lanes
    REFERENCING NEW TABLE AS new_lanes FOR EACH STATEMENT EXECUTE FUNCTION outreach_lanes_made();

-- A new campaign gets its lane. Its owner's plan is read after the foreign key check
-- has share-locked the owner's users row, so a plan change in flight (which locks that
-- row, below) is waited for and seen.
CREATE FUNCTION outreach_campaigns_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO lanes AS l (id, owner_id, priority, paused)
    SELECT r.id, r.owner_id, r.priority, r.paused
    FROM outreach_lane_ranks(ARRAY(SELECT id FROM new_campaigns)) r
    ORDER BY r.id
    ON CONFLICT (id) DO UPDATE
        SET owner_id = excluded.owner_id, priority = excluded.priority, paused = excluded.paused;
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_insert AFTER INSERT ON campaigns
    REFERENCING NEW TABLE AS new_campaigns FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_inserted();

-- Paused or resumed: the lane's paused flag. A new owner: its priority.
CREATE FUNCTION outreach_campaigns_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT n.id FROM new_campaigns n JOIN old_campaigns o ON o.id = n.id
        WHERE n.status IS DISTINCT FROM o.status), false, true);
    PERFORM outreach_rank_lanes(ARRAY(
        SELECT n.id FROM new_campaigns n JOIN old_campaigns o ON o.id = n.id
        WHERE n.user_id IS DISTINCT FROM o.user_id), true, false);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_update AFTER UPDATE ON campaigns
    REFERENCING OLD TABLE AS old_campaigns NEW TABLE AS new_campaigns
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_updated();

-- A deleted campaign's jobs are gone with it (ON DELETE CASCADE); so is its lane.
CREATE FUNCTION outreach_campaigns_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM lanes WHERE id IN (SELECT id FROM old_campaigns);
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_delete AFTER DELETE ON campaigns
    REFERENCING OLD TABLE AS old_campaigns FOR EACH STATEMENT EXECUTE FUNCTION outreach_campaigns_deleted();

-- A plan changed (subscribed, changed, cancelled): re-rank the owners' campaigns. The
-- owners' users rows are locked first: a campaign being created for one of them right
-- now (its insert holds a key-share lock on that row until it commits) is waited for,
-- then seen; one created later waits for this change and reads the new plan.
CREATE FUNCTION outreach_rank_owners(user_ids uuid[]) RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM 1 FROM users u WHERE u.id = ANY (user_ids) ORDER BY u.id FOR UPDATE;
    PERFORM outreach_rank_lanes(ARRAY(SELECT c.id FROM campaigns c WHERE c.user_id = ANY (user_ids)),
                                true, false);
END $$;
REVOKE EXECUTE ON FUNCTION outreach_rank_owners(uuid[]) FROM PUBLIC;

CREATE FUNCTION outreach_subscriptions_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(SELECT user_id FROM new_subscriptions));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_insert AFTER INSERT ON subscriptions
    REFERENCING NEW TABLE AS new_subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_inserted();

CREATE FUNCTION outreach_subscriptions_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(
        SELECT n.user_id FROM new_subscriptions n
        LEFT JOIN old_subscriptions o ON o.user_id = n.user_id
        WHERE n.plan IS DISTINCT FROM o.plan
        UNION
        SELECT o.user_id FROM old_subscriptions o
        WHERE NOT EXISTS (SELECT 1 FROM new_subscriptions n WHERE n.user_id = o.user_id)));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_update AFTER UPDATE ON subscriptions
    REFERENCING OLD TABLE AS old_subscriptions NEW TABLE AS new_subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_updated();

CREATE FUNCTION outreach_subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_rank_owners(ARRAY(SELECT user_id FROM old_subscriptions));
    RETURN NULL;
END $$;
CREATE TRIGGER outreach_lanes_delete AFTER DELETE ON subscriptions
    REFERENCING OLD TABLE AS old_subscriptions FOR EACH STATEMENT EXECUTE FUNCTION outreach_subscriptions_deleted();
