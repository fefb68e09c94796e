-- When the server last loaded its configuration (pg_hba.conf included), as this session knows it.
SELECT pg_conf_load_time()
