-- Move the queue's (and the loaded plug-ins') objects from public into :schema: the names
-- their migrations create (migration 0038).
SELECT public.relocate_from_public(:names::text[], :schema::text)
