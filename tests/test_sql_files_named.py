"""Every statement of the queue names its parameters: no $n anywhere in sql/queries, and
each file loads as a statement."""

import re

import pytest

from app.engine.queries import SQL_DIR, statement

QUERIES = sorted(p.name.removesuffix(".sql") for p in (SQL_DIR / "queries").iterdir() if p.name.endswith(".sql"))


def test_there_are_statements_to_check():
    assert "claim" in QUERIES and len(QUERIES) > 50


@pytest.mark.parametrize("name", QUERIES)
def test_the_statement_names_its_parameters(name):
    text = (SQL_DIR / "queries" / f"{name}.sql").read_text(encoding="utf-8")
    assert not re.search(r"\$[0-9]", text), f"sql/queries/{name}.sql: write :name, not $n"
    statement(name)  # loads: no positional parameter outside comments and literals either
