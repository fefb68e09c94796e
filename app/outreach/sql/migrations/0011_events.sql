-- The example's own live events: the contacts a crawl found and the drafts written, one
-- event per campaign and statement (a page's contacts arrive in one INSERT), into the
-- campaign's lane room and its owner's account room (the queue's events_emit numbers
-- them): {"lane", "campaignId", "count", "ids": the first 50}.
CREATE FUNCTION outreach_events_new(p_type text, p_rows jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    a_room text[]; a_type text[]; a_data jsonb[];
BEGIN
    WITH g AS (
        SELECT (r->>'campaign_id')::uuid AS campaign, count(*) AS n,
               (array_agg(r->>'id' ORDER BY r->>'id'))[1:50] AS ids
        FROM jsonb_array_elements(coalesce(p_rows, '[]')) AS r GROUP BY 1
    ), d AS (
        SELECT g.campaign, c.user_id,
               jsonb_build_object('lane', g.campaign, 'campaignId', g.campaign, 'count', g.n,
                                  'ids', to_jsonb(g.ids)) AS data
        FROM g JOIN campaigns c ON c.id = g.campaign
    ), rooms AS (
        SELECT 'lane:' || campaign AS room, data FROM d
        UNION ALL SELECT 'account:' || user_id, data FROM d WHERE user_id IS NOT NULL
    )
    SELECT array_agg(room), array_agg(p_type), array_agg(data) INTO a_room, a_type, a_data FROM rooms;
    PERFORM events_emit(a_room, a_type, a_data);
END $$;
REVOKE EXECUTE ON FUNCTION outreach_events_new(text, jsonb) FROM PUBLIC;

CREATE FUNCTION contacts_events_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_events_new('contacts.found',
        (SELECT jsonb_agg(jsonb_build_object('id', id, 'campaign_id', campaign_id)) FROM new_rows));
    RETURN NULL;
END $$;
CREATE TRIGGER events_insert AFTER INSERT ON contacts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION contacts_events_after_insert();

CREATE FUNCTION drafts_events_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM outreach_events_new('drafts.written',
        (SELECT jsonb_agg(jsonb_build_object('id', id, 'campaign_id', campaign_id)) FROM new_rows));
    RETURN NULL;
END $$;
CREATE TRIGGER events_insert AFTER INSERT ON drafts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION drafts_events_after_insert();
