#!/usr/bin/env bash
# Vendor axe-core for the browser tests from the npm registry: scripts/vendor_axe.sh 4.14.1
set -euo pipefail
version="${1:?usage: scripts/vendor_axe.sh VERSION}"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "axe-core@${version}" >/dev/null && tar xzf axe-core-*.tgz)
target="$here/tests/browser/vendor/axe-core"
cp "$work/package/axe.min.js" "$work/package/LICENSE" "$target/"
sha256sum "$target/axe.min.js"
