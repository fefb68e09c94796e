-- Where the migrations go: the first schema of the connection's search_path (the
-- DATABASE_SCHEMA the URL asks for), or public when it names none of its own.
SELECT coalesce(nullif(trim(both '"' FROM trim(split_part(current_setting('search_path'), ',', 1))), '$user'),
                'public') AS schema
