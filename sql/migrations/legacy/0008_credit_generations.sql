-- A retried job pays again once its earlier charge was refunded: charges and refunds
-- are numbered by generation (seq = refunds so far), still at most one charge and one
-- refund per generation. Before, a job refunded on giving up and then retried by a
-- person drafted for free, because its old charge still counted.
ALTER TABLE credit_ledger ADD COLUMN seq integer NOT NULL DEFAULT 0 CHECK (seq >= 0);
ALTER TABLE credit_ledger DROP CONSTRAINT credit_ledger_job_id_kind_key;
ALTER TABLE credit_ledger ADD CONSTRAINT credit_ledger_once_per_generation UNIQUE (job_id, kind, seq);
