-- The user with e-mail $1, created when new. `created` says which.
WITH new AS (
    INSERT INTO users (email) VALUES ($1)
    ON CONFLICT (email) DO NOTHING
    RETURNING id
)
SELECT id, true AS created FROM new
UNION ALL
SELECT id, false FROM users WHERE email = $1
