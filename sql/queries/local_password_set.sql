-- The embedded server's superuser (the connecting role) gets the password passed in the
-- session setting skiplock.local_password (ALTER ROLE takes no parameters); the server
-- stores it SCRAM-hashed.
DO $$
BEGIN
    EXECUTE format('ALTER ROLE %I PASSWORD %L', current_user, current_setting('skiplock.local_password'));
END $$
