# The two commands of the quick start: `make run` and `make test`. Both set up .venv
# and, when DATABASE_URL is unset, an embedded PostgreSQL; nothing else is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test bench run migrate package clean redis-server pgbouncer chromium postgresql-15 promtool docs chaos

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Three test processes (pytest-xdist), each with its own embedded PostgreSQL: most tests
# wait on the database or a subprocess, so even on two cores a third keeps them busy (two
# left them about half idle: 325-339 s against 258-300 s with three, the same machine).
test: $(STAMP) redis-server pgbouncer chromium postgresql-15 promtool
	$(PY) -m pytest -n 3

# The Redis tests (tests/api/test_redis.py) start and kill a real redis-server of their
# own on a free port. Installed from Debian's packages when missing and we are root (as
# in CI); elsewhere those tests are skipped with a note saying how to install it.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server (Debian package) for the Redis tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends redis-server >/dev/null; \
	  else \
	    echo "redis-server is not installed: the Redis tests will be skipped (apt-get install redis-server)"; \
	  fi; }

# The pooler tests (tests/pooler/) put a real PgBouncer in transaction mode in front of the
# test server. Installed like redis-server: from Debian's packages when missing and root.
pgbouncer:
	@command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing pgbouncer (Debian package) for the pooler tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends pgbouncer >/dev/null; \
	  else \
	    echo "pgbouncer is not installed: the pooler tests will be skipped (apt-get install pgbouncer)"; \
	  fi; }

# The dashboard's browser tests (tests/events/test_dashboard_browser.py) drive Debian's
# chromium through Playwright (Playwright's own browser download is not used). Installed
# like redis-server; elsewhere those tests are skipped with a note.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (Debian package) for the dashboard's browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends chromium >/dev/null; \
	  else \
	    echo "chromium is not installed: the browser tests will be skipped (apt-get install chromium)"; \
	  fi; }

# The oldest PostgreSQL Skiplock supports, for tests/test_normal_role.py (the embedded server
# is the newest). Installed like redis-server; elsewhere that test's 15 case is skipped.
postgresql-15:
	@[ -x /usr/lib/postgresql/15/bin/postgres ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql-15 (Debian package) for the oldest-server test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends postgresql-15 >/dev/null; \
	  else \
	    echo "PostgreSQL 15 is not installed: the oldest-server test will be skipped (apt-get install postgresql-15)"; \
	  fi; }

# promtool checks the alert rules in docs/alerts/ (tests/test_horizon_view.py); it comes
# with Debian's prometheus package. Installed like redis-server; elsewhere those tests are skipped.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing prometheus (Debian package) for promtool, which checks the alert rules"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends prometheus >/dev/null; \
	  else \
	    echo "promtool is not installed: the alert rules' tests will be skipped (apt-get install prometheus)"; \
	  fi; }

bench: $(STAMP)
	$(PY) -m bench

# Every fault at once for a few minutes (kill -9, PostgreSQL restarts, Redis down, a failing
# site and LLM), then the invariants read from the database (docs/reliability.md). Seeded:
# `make chaos SEED=7`. A short version runs in `make test` (tests/test_chaos_short.py).
SEED ?= 15
chaos: $(STAMP) redis-server
	$(PY) -m bench.chaos --seed $(SEED)

migrate: $(STAMP)
	$(PY) -m app migrate

# The app on 127.0.0.1:8000 in local dev mode, an embedded PostgreSQL under .data/ when
# DATABASE_URL is unset, and a ticker that runs the pipeline every LOCAL_TICK_SECONDS.
run: $(STAMP)
	$(PY) -m app.dev

# The Lambda artifact (.build/lambda.zip) and the CloudFormation template (.serverless/),
# offline: no AWS account is needed until `npx serverless@3 deploy`.
SERVERLESS ?= npx --yes serverless@3.40.0
package: $(STAMP)
	$(PY) -m app.lambda_package
	SLS_TELEMETRY_DISABLED=1 SLS_NOTIFICATIONS_MODE=off $(SERVERLESS) package

# docs/configuration.md is generated from the settings' field descriptions; tests/test_docs.py
# fails when it is out of date.
docs: $(STAMP)
	$(PY) -m app.config_docs --write

clean:
	rm -rf $(VENV) .pytest_cache
