-- Every function the migrations made in :schema resolves names in :schema (migration 0038).
SELECT pin_to_schema(:schema::text, :names::text[])
