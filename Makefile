# The two commands: `make run` serves the console; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# PostgreSQL for the second pass of the suite (trust auth on the local server by default).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentops
# The Redis channel layer for that pass, as production uses it (a database of its own: the
# reliability suite's broker uses 1, the browser suite's 3 and 4, `serve`'s 6, the SQLite pass 8-11).
TEST_REDIS_URL ?= redis://127.0.0.1:6379/5
# STRICT=1 (CI): PostgreSQL must be reachable; nothing that needs it is skipped.
STRICT ?= 0
PYTEST_ARGS ?=

.PHONY: install run test lint bench clean soak

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# pip's output goes to a log, shown only when the install fails.
$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	@echo "== installing into $(VENV) (log: $(VENV)/install.log) =="
	@{ $(BIN)/pip install --upgrade pip && $(BIN)/pip install -e '.[test]'; } \
		> $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

run: install
	@$(BIN)/python manage.py migrate --noinput -v0
	@$(BIN)/python manage.py seed_demo
	@$(BIN)/python manage.py serve --demo-login $(PORT)

# The two passes run side by side (scripts/suite.sh says how they keep apart).
test: lint
	@STRICT=$(STRICT) bash scripts/install_browser.sh
	@bash scripts/suite.sh $(BIN)/pytest "$(TEST_DATABASE_URL)" "$(TEST_REDIS_URL)" $(STRICT) $(PYTEST_ARGS)

# The long versions of the reliability suite (docs/reliability.md): the chaos soak (SOAK_RUNS runs
# under faults) on a PostgreSQL server and a Redis it starts itself and crashes, then, on the
# PostgreSQL of TEST_DATABASE_URL, races at 1,000 and the
# fuzzing at 2,000 examples per form, per API operation and per condition test (a form at 2,000
# examples can outlast the five minutes `make test` allows a test on PostgreSQL: this command
# allows an hour). `make test` runs the bounded versions.
SOAK_RUNS ?= 1000
SOAK_DATABASE ?= test_agentops_soak
soak: install
	AGENTOPS_TEST_DATABASE=$(SOAK_DATABASE) AGENTOPS_STRICT=1 AGENTOPS_SOAK=1 \
		AGENTOPS_SOAK_RUNS=$(SOAK_RUNS) $(BIN)/python -m tests.reliability.own_postgres \
		$(BIN)/pytest -m soak tests/reliability $(PYTEST_ARGS)
	DATABASE_URL="$(TEST_DATABASE_URL)" AGENTOPS_TEST_DATABASE=$(SOAK_DATABASE) AGENTOPS_STRICT=1 \
		AGENTOPS_SOAK=1 AGENTOPS_FUZZ_EXAMPLES=2000 \
		$(BIN)/pytest --timeout 3600 tests/reliability/test_races.py tests/reliability/test_approval_races.py \
			tests/fuzz tests/api/test_schema.py $(PYTEST_ARGS)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench.load --minutes 5

# Benchmarks (bench/): each prints its figures beside a baseline measured in the same run.
bench: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var
