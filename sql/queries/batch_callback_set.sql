-- The job to enqueue when batch :batch_id ends (the enqueue_callback trigger, migration 0046).
UPDATE batches SET callback_type = :type, callback_payload = :payload::jsonb
WHERE id = :batch_id
