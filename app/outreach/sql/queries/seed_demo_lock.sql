-- One demo seeder at a time, across processes (released at transaction end).
SELECT pg_advisory_xact_lock(hashtext('skiplock.seed_demo'))
