"""Named SQL: each file in sql/queries/ is one query, loaded by its name."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent.parent / "sql"


@lru_cache
def query(name: str) -> str:
    path = SQL_DIR / "queries" / f"{name}.sql"
    text = path.read_text()
    if "{priority}" in text:
        from app.outreach.plans import priority_sql  # transitional: goes with generic lanes
        text = text.replace("{priority}", priority_sql())
    return text


def migrations() -> list[tuple[str, str]]:
    """(version, sql) for each migration file, in order."""
    files = sorted((SQL_DIR / "migrations").glob("*.sql"))
    return [(f.stem, f.read_text()) for f in files]
