#!/usr/bin/env bash
# Debian's Chromium for the browser tests (tests/browser), which Playwright drives. Playwright's
# own browser download is never used: `playwright install` needs a host that is not reachable.
# STRICT=1 (CI): a browser that is missing and cannot be installed is an error. Otherwise the
# browser tests skip, saying why.
set -uo pipefail
CHROMIUM="${AGENTOPS_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
	exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
	echo "== installing Debian's chromium for the browser tests =="
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq chromium >/dev/null
	if [ -x "$CHROMIUM" ]; then
		exit 0
	fi
fi
message="Chromium is missing at $CHROMIUM and could not be installed (apt-get install chromium, as root)"
if [ "${STRICT:-0}" = "1" ]; then
	echo "$message: STRICT=1 requires it" >&2
	exit 1
fi
echo "== $message: the browser tests will be skipped =="
