-- Hand the embedded server a password for the next statement of this transaction, as the
-- session setting skiplock.local_password: ALTER ROLE takes no parameters.
SELECT set_config('skiplock.local_password', :password, true)
