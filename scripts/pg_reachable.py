"""Exit 0 if the PostgreSQL server in the given URL accepts a connection, else 1."""

import sys

import psycopg

try:
    with psycopg.connect(sys.argv[1], dbname="postgres", connect_timeout=3):
        pass
except psycopg.Error as exc:
    print(f"PostgreSQL unreachable: {exc}".splitlines()[0], file=sys.stderr)
    sys.exit(1)
