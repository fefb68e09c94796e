# The two commands of the quick start: `make run` and `make test`. Both set up .venv
# and, when DATABASE_URL is unset, an embedded PostgreSQL; nothing else is needed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test bench run migrate package clean redis-server pgbouncer chromium postgresql-15 promtool docs chaos

install: $(STAMP)

# dev: the tests' tools; otel: the SDK tests/test_traces.py traces runs with
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,otel]'
	touch $(STAMP)

# Three test processes (pytest-xdist), each with its own embedded PostgreSQL: most tests
# wait on the database or a subprocess, so even on two cores a third keeps them busy (two
# left them about half idle: 325-339 s against 258-300 s with three, the same machine).
# The queue's tests run without any plug-in; then the example plug-in's, with it loaded.
test: $(STAMP) redis-server pgbouncer chromium postgresql-15 promtool
	PIPELINE_PLUGINS= $(PY) -m pytest -n 3 tests --ignore=tests/outreach
	$(PY) -m pytest -n 3 tests/outreach

# What some tests use besides Python, each from Debian's packages: installed when missing
# and we are root (as in CI); elsewhere those tests are skipped with a note saying how.
# $(call debian_package,CHECK,PACKAGE,THE TESTS THAT NEED IT)
define debian_package
	@$(1) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(2) (Debian package) for $(3)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $(2) >/dev/null; \
	  else \
	    echo "$(2) is not installed: $(3) will be skipped (apt-get install $(2))"; \
	  fi; }
endef

# The Redis tests (tests/api/test_redis.py) start and kill a real redis-server of their own.
redis-server:
	$(call debian_package,command -v redis-server >/dev/null 2>&1,redis-server,the Redis tests)

# The pooler tests (tests/pooler/) put a real PgBouncer in transaction mode in front of the server.
pgbouncer:
	$(call debian_package,command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ],pgbouncer,the pooler tests)

# The dashboard's browser tests (tests/events/test_dashboard_browser.py) drive Debian's
# chromium through Playwright (Playwright's own browser download is not used).
chromium:
	$(call debian_package,command -v chromium >/dev/null 2>&1,chromium,the dashboard's browser tests)

# The oldest PostgreSQL Skiplock supports, for tests/test_normal_role.py (the embedded
# server is the newest); it brings psql too.
postgresql-15:
	$(call debian_package,[ -x /usr/lib/postgresql/15/bin/postgres ],postgresql-15,the tests on the oldest PostgreSQL)

# promtool (Debian's prometheus) checks the alert rules in docs/alerts/ (tests/test_horizon_view.py).
promtool:
	$(call debian_package,command -v promtool >/dev/null 2>&1,prometheus,the alert rules' tests)

bench: $(STAMP)
	$(PY) -m bench

# Every fault at once for a few minutes (kill -9, PostgreSQL restarts, Redis down, a failing
# site and LLM), then the invariants read from the database (docs/reliability.md). Seeded:
# `make chaos SEED=7`. A short version runs in `make test` (tests/outreach/test_chaos_short.py).
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
# offline: no AWS account is needed until `npx serverless@3 deploy`. The modules
# PIPELINE_STAGES and PIPELINE_PLUGINS name go in too; more of the team's code with
# `make package INCLUDE="../team/mystages.py ../team/mylib"` (files, folders or module names).
SERVERLESS ?= npx --yes serverless@3.40.0
INCLUDE ?=
package: $(STAMP)
	$(PY) -m app.lambda_package $(foreach item,$(INCLUDE),--include $(item))
	SLS_TELEMETRY_DISABLED=1 SLS_NOTIFICATIONS_MODE=off $(SERVERLESS) package

# docs/configuration.md is generated from the settings' field descriptions; tests/test_docs.py
# fails when it is out of date.
docs: $(STAMP)
	$(PY) -m app.config_docs --write

clean:
	rm -rf $(VENV) .pytest_cache
