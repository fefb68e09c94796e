"""The example's named SQL: sql/outreach/queries/<name>.sql, loaded by name."""

from app.engine.queries import queries_of

query = queries_of("outreach")
