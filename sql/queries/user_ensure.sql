-- The user with e-mail :email, created when new. `created` says which.
WITH new AS (
    INSERT INTO users (email) VALUES (:email)
    ON CONFLICT (email) DO NOTHING
    RETURNING id
)
SELECT id, true AS created FROM new
UNION ALL
SELECT id, false FROM users WHERE email = :email
