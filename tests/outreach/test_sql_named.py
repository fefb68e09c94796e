"""Every statement of the example names its parameters, as the queue's do
(tests/test_sql_files_named.py)."""

import re

import pytest

from app.outreach.sql import SQL, statement

QUERIES = sorted(p.name.removesuffix(".sql") for p in (SQL / "queries").iterdir() if p.name.endswith(".sql"))


def test_there_are_statements_to_check():
    assert "campaign_get" in QUERIES


@pytest.mark.parametrize("name", QUERIES)
def test_the_statement_names_its_parameters(name):
    text = (SQL / "queries" / f"{name}.sql").read_text(encoding="utf-8")
    assert not re.search(r"\$[0-9]", text), f"{name}.sql: write :name, not $n"
    statement(name)  # loads: no positional parameter outside comments and literals either
