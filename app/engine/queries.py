"""Named SQL: each file in sql/queries/ is one query, loaded by its name."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent.parent / "sql"


@lru_cache
def query(name: str) -> str:
    return (SQL_DIR / "queries" / f"{name}.sql").read_text()


def migrations() -> list[tuple[str, str]]:
    """(version, sql) for each migration file, in order."""
    files = sorted((SQL_DIR / "migrations").glob("*.sql"))
    return [(f.stem, f.read_text()) for f in files]
