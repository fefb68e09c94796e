"""The SQL as a package: this folder is installed as `app.sql` (pyproject.toml's
package-dir), its *.sql files as package data, so an editable install, a wheel and the
Lambda zip all read them through importlib.resources (app/engine/queries.py). The file
exists because an editable install only maps a regular package."""
