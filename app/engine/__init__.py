"""The queue engine: SQL-facing, knows nothing of HTTP or of stages' handlers."""
