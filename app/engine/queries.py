"""Named SQL: each file in sql/queries/ is one query, loaded by its name and called with
keyword arguments (statement("<name>").bind(...), app/engine/sql_params.py). A plug-in keeps
its own in the SQL folder its Plugin declares (Plugin.sql), <folder>/queries/<name>.sql, and
loads them with queries_of(<folder>).

sql/ is installed as the package app.sql (pyproject.toml), so the files are read as its
package data: the same way from an editable install, a wheel or the Lambda zip."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from app.engine.sql_params import Statement, translate

SQL_DIR: Traversable = files("app.sql")


def _reader(folder: Traversable):
    """A cached reader of <folder>/<name>.sql by name (one cache a folder: not every
    Traversable is hashable)."""
    @lru_cache
    def read(name: str) -> str:
        return (folder / f"{name}.sql").read_text(encoding="utf-8")
    return read


_queue_query = _reader(SQL_DIR / "queries")


def query(name: str) -> str:
    """The queue's own query `name` (sql/queries/<name>.sql)."""
    return _queue_query(name)


@lru_cache
def statement(name: str) -> Statement:
    """The queue's query `name` with its :name parameters numbered for asyncpg, once."""
    return translate(query(name), f"sql/queries/{name}.sql")


def statements_of(sql: Traversable):
    """The loader of a plug-in's named statements, <sql>/queries/<name>.sql, each with its
    :name parameters numbered for asyncpg once, `sql` being the folder its Plugin declares."""
    read = queries_of(sql)

    @lru_cache
    def plugin_statement(name: str) -> Statement:
        return translate(read(name), f"{name}.sql")
    return plugin_statement


def queries_of(sql: Traversable):
    """The loader of a plug-in's named queries, <sql>/queries/<name>.sql, `sql` being the
    folder its Plugin declares (Plugin.sql)."""
    return _reader(sql / "queries")
