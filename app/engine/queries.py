"""Named SQL: each file in sql/queries/ is one query, loaded by its name and called with
keyword arguments (statement("<name>").bind(...), app/engine/sql_params.py). A plug-in keeps
its own in sql/<plug-in>/queries/ and loads them with queries_of("<plug-in>").

sql/ is installed as the package app.sql (pyproject.toml), so the files are read as its
package data: the same way from an editable install, a wheel or the Lambda zip."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from app.engine.sql_params import Statement, translate

SQL_DIR: Traversable = files("app.sql")


@lru_cache
def _read(folder: tuple[str, ...], name: str) -> str:
    # keyed by the folder's names, not a Traversable: not every Traversable is hashable
    path = SQL_DIR
    for part in folder:
        path = path / part
    return (path / f"{name}.sql").read_text(encoding="utf-8")


def query(name: str) -> str:
    """The queue's own query `name` (sql/queries/<name>.sql)."""
    return _read(("queries",), name)


@lru_cache
def statement(name: str) -> Statement:
    """The queue's query `name` with its :name parameters numbered for asyncpg, once."""
    return translate(query(name), f"sql/queries/{name}.sql")


def queries_of(plugin: str):
    """The loader of a plug-in's named queries (sql/<plugin>/queries/<name>.sql)."""
    folder = (plugin, "queries")

    def plugin_query(name: str) -> str:
        return _read(folder, name)
    return plugin_query
