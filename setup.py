"""The package list, the one thing pyproject.toml cannot say: app/'s packages as discovery
finds them, and app.sql with its folders, which live in sql/ (pyproject.toml maps app.sql
to sql/). Discovery cannot see a package whose folder is not under its parent's, and a
hand-written list would miss the next folder someone adds. Everything else is in
pyproject.toml."""

from setuptools import find_namespace_packages, setup

SQL = ["app.sql", *(f"app.sql.{name}" for name in find_namespace_packages("sql"))]
setup(packages=[*find_namespace_packages(include=["app", "app.*"]), *SQL])
