"""Named SQL: each file in sql/queries/ is one query, loaded by its name. A plug-in keeps
its own in sql/<plug-in>/queries/ and loads them with queries_of("<plug-in>")."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent.parent / "sql"


@lru_cache
def _read(folder: Path, name: str) -> str:
    return (folder / f"{name}.sql").read_text()


def query(name: str) -> str:
    """The queue's own query `name` (sql/queries/<name>.sql)."""
    return _read(SQL_DIR / "queries", name)


def queries_of(plugin: str):
    """The loader of a plug-in's named queries (sql/<plugin>/queries/<name>.sql)."""
    folder = SQL_DIR / plugin / "queries"

    def plugin_query(name: str) -> str:
        return _read(folder, name)
    return plugin_query

