"""The example's SQL, package data beside its code, which its Plugin declares (Plugin.sql):
migrations/NNNN_name.sql, its schema (recorded as outreach/NNNN_name), and
queries/<name>.sql, its named statements, loaded by name with query("<name>")."""

from importlib.resources import files

from app.engine.queries import queries_of

SQL = files(__name__)
query = queries_of(SQL)
