#!/usr/bin/env bash
# `make test`'s two passes of the suite, side by side: on SQLite with the in-memory channel layer,
# and on PostgreSQL with live updates on the Redis channel layer, as production runs them.
#
#   scripts/suite.sh PYTEST DATABASE_URL REDIS_URL STRICT [pytest arguments...]
#
# Each pass keeps about one core busy (most of its time is spent waiting on worker processes,
# servers and the browser), so side by side they take little more than the longer one alone.
# They share nothing: the SQLite pass has Redis databases of its own (the PostgreSQL pass keeps the
# defaults), each pass its own test database, screenshot folder and pytest cache. The SQLite
# pass's output is shown once both have finished; either failing fails the suite. Each pass ends
# with its 20 slowest tests, to see where the suite's time goes.
set -uo pipefail

pytest=$1 database_url=$2 redis_url=$3 strict=$4
shift 4

# The SQLite pass's Redis databases: the reliability suite's broker, the browser suite's broker
# and channel layer, and `serve`'s (the PostgreSQL pass uses 1, 3, 4 and 6). Each pass's servers
# listen on ports of its own range (tests/support/processes.py, free_port).
sqlite_pass=(
	env
	AGENTOPS_TEST_PORTS=20000-25999
	AGENTOPS_TEST_BROKER_URL=redis://127.0.0.1:6379/8
	AGENTOPS_BROWSER_BROKER_URL=redis://127.0.0.1:6379/9
	AGENTOPS_BROWSER_REDIS_URL=redis://127.0.0.1:6379/10
	AGENTOPS_TEST_SERVE_REDIS_URL=redis://127.0.0.1:6379/11
	"$pytest" -m "not soak" --durations=20 -o cache_dir=.pytest_cache/sqlite
)

postgres_pass=(
	env DATABASE_URL="$database_url" REDIS_URL="$redis_url" AGENTOPS_STRICT="$strict"
	AGENTOPS_TEST_PORTS=26000-31999
	"$pytest" -m "not soak" --durations=20
)

if ! "$(dirname "$pytest")/python" scripts/pg_reachable.py "$database_url"; then
	if [ "$strict" = "1" ]; then
		echo "PostgreSQL at $database_url is not reachable, and STRICT=1 requires it"
		exit 1
	fi
	echo "== test suite on SQLite =="
	"${sqlite_pass[@]}" "$@"
	status=$?
	echo "== PostgreSQL not reachable: skipped the PostgreSQL pass (STRICT=1 makes this an error) =="
	exit $status
fi

mkdir -p var
log=var/test-sqlite.log
echo "== test suite on SQLite, side by side with the PostgreSQL pass (output: $log, shown after) =="
"${sqlite_pass[@]}" "$@" >"$log" 2>&1 &
sqlite_pid=$!
# Interrupted, the SQLite pass ends with this script.
trap 'kill "$sqlite_pid" 2>/dev/null' EXIT

echo "== test suite on PostgreSQL, live updates on the Redis channel layer =="
"${postgres_pass[@]}" "$@"
postgres_status=$?

wait "$sqlite_pid"
sqlite_status=$?
trap - EXIT
echo "== test suite on SQLite: its output =="
cat "$log"
echo "== SQLite pass: exit $sqlite_status; PostgreSQL pass: exit $postgres_status =="
[ "$sqlite_status" = 0 ] && [ "$postgres_status" = 0 ]
