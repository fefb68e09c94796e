-- A job that failed (or finished) and is made pending again, by a retry over the API, the
-- CLI or plain SQL, wakes a waiting worker as a new job does, instead of waiting out its
-- poll. Row by row with a WHEN, which is evaluated without calling anything: the
-- pipeline's own updates (claims, endings, deferrals) never match it. NOTIFYs of one
-- transaction are merged into one.
CREATE TRIGGER jobs_notify_retried AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IN ('failed', 'done'))
    EXECUTE FUNCTION jobs_notify_insert();
