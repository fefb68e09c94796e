-- The audit log is append-only, so whatever it copies stays for good: a job's payload
-- over 2 KiB (of its jsonb text) is kept as its SHA-256 and size instead,
--     {..., "payloadSha256": "<hex>", "payloadBytes": 61440}
-- in both row images. Done as the rows arrive (a BEFORE INSERT trigger on audit_log),
-- so it holds whichever function writes them, audit_row() or a later one.

CREATE OR REPLACE FUNCTION audit_digest_payload(image jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN image ? 'payload' AND octet_length((image -> 'payload')::text) > 2048
        THEN (image - 'payload') || jsonb_build_object(
            'payloadSha256', encode(sha256(convert_to((image -> 'payload')::text, 'UTF8')), 'hex'),
            'payloadBytes', octet_length((image -> 'payload')::text))
        ELSE image
    END
$$;

CREATE OR REPLACE FUNCTION audit_log_digest_payloads() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    NEW.old_row := audit_digest_payload(NEW.old_row);
    NEW.new_row := audit_digest_payload(NEW.new_row);
    RETURN NEW;
END $$;

CREATE TRIGGER digest_payloads BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_digest_payloads();
