"""The example's SQL, package data beside its code, which its Plugin declares (Plugin.sql):
migrations/NNNN_name.sql, its schema (recorded as outreach/NNNN_name), and
queries/<name>.sql, its named statements, loaded by name with statement("<name>") and
called with keyword arguments (statement("<name>").bind(...))."""

from importlib.resources import files

from app.engine.queries import statements_of

SQL = files(__name__)
statement = statements_of(SQL)
