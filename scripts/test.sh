#!/usr/bin/env bash
# The whole test suite: unit, integration, fault and deploy tests against real servers.
# The file list is built here (one sorted list, the same on every Node.js).
# Every relay's log is kept (RELAY_TEST_LOG_DIR, a temporary directory unless set); when a test fails,
# the logs of the tests that failed are printed after the run (scripts/failed-test-logs.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_PROMTOOL=1 bash scripts/setup.sh
source scripts/runtime.sh
mapfile -t files < <(find test -name '*.test.ts' -not -path '*/node_modules/*' | sort)
if [ "${#files[@]}" -eq 0 ]; then echo "no test files found" >&2; exit 1; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export RELAY_TEST_LOG_DIR="${RELAY_TEST_LOG_DIR:-$work/relay-logs}"
set +e
node --import tsx --test --test-reporter=spec --test-concurrency="${TEST_CONCURRENCY:-2}" --test-timeout=600000 "${files[@]}" 2>&1 | tee "$work/output"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then node --import tsx scripts/failed-test-logs.ts "$work/output" "$RELAY_TEST_LOG_DIR"; fi
exit "$rc"
