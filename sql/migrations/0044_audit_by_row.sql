-- A job's story on the dashboard (GET /jobs/{id}/timeline) reads what people did to that
-- one row: by row, newest first, without walking the whole log.
CREATE INDEX audit_log_row_idx ON audit_log (table_name, row_id, at DESC, id DESC);
