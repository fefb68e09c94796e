# The two commands of the quick start: `make run` and `make test`. Both set up .venv
# and, when DATABASE_URL is unset, an embedded PostgreSQL; nothing else is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test bench run migrate clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench

migrate: $(STAMP)
	$(PY) -m app migrate

clean:
	rm -rf $(VENV) .pytest_cache
