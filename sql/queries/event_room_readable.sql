-- Whether the transaction's tenant may read room :room (see events_room_readable in
-- migration 0021: an admin any room, a tenant its account, its lanes and its batches).
SELECT events_room_readable(:room)
