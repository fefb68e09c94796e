"""Named SQL: each file in sql/queries/ is one statement, loaded by its name with
statement("<name>") and called with keyword arguments:

    await db.fetch(*statement("runs_list").bind(stop_reason=None, ..., limit=50))

A statement writes its parameters as :name (app/engine/sql_params.py numbers them for
asyncpg once, when the file is first loaded). A plug-in keeps its own in the SQL folder its
Plugin declares (Plugin.sql), <folder>/queries/<name>.sql, and loads them with
statements_of(<folder>).

sql/ is installed as the package app.sql (pyproject.toml), so the files are read as its
package data: the same way from an editable install, a wheel or the Lambda zip."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from app.engine.sql_params import Statement, translate

SQL_DIR: Traversable = files("app.sql")


def _loader(folder: Traversable, label: str):
    """A cached loader of <folder>/<name>.sql by name, translated (one cache a folder: not
    every Traversable is hashable). `label` names the folder in errors."""
    @lru_cache
    def load(name: str) -> Statement:
        return translate((folder / f"{name}.sql").read_text(encoding="utf-8"), f"{label}/{name}.sql")
    return load


_queue_statement = _loader(SQL_DIR / "queries", "sql/queries")


def statement(name: str) -> Statement:
    """The queue's statement `name` (sql/queries/<name>.sql)."""
    return _queue_statement(name)


def statements_of(sql: Traversable):
    """The loader of a plug-in's named statements, <sql>/queries/<name>.sql, `sql` being the
    folder its Plugin declares (Plugin.sql)."""
    return _loader(sql / "queries", f"{sql.name}/queries")
