-- Refund job :job_id's standing charge (its latest generation), exactly once, when it is owed
-- (pending or failed, no draft delivered): billing_refund_job in
-- sql/migrations/0009_admin_role_and_billing.sql, a SECURITY DEFINER function, because
-- a cancel through the API runs this as a role that may not write credits. Returns the
-- credits refunded.
SELECT billing_refund_job(:job_id)
