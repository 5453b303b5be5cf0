# The two commands: `make run` serves the console; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# PostgreSQL for the second pass of the suite (trust auth on the local server by default).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentops
# STRICT=1 (CI): PostgreSQL must be reachable; nothing that needs it is skipped.
STRICT ?= 0
PYTEST_ARGS ?=

.PHONY: install run test lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py serve $(PORT)

test: lint
	@echo "== test suite on SQLite =="
	$(BIN)/pytest $(PYTEST_ARGS)
	@if $(BIN)/python scripts/pg_reachable.py "$(TEST_DATABASE_URL)"; then \
		echo "== test suite on PostgreSQL =="; \
		DATABASE_URL="$(TEST_DATABASE_URL)" AGENTOPS_STRICT=$(STRICT) $(BIN)/pytest $(PYTEST_ARGS); \
	elif [ "$(STRICT)" = "1" ]; then \
		echo "PostgreSQL at $(TEST_DATABASE_URL) is not reachable, and STRICT=1 requires it"; exit 1; \
	else \
		echo "== PostgreSQL not reachable: skipped the PostgreSQL pass (STRICT=1 makes this an error) =="; \
	fi

clean:
	rm -rf $(VENV) var
