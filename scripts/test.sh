#!/usr/bin/env bash
# The whole test suite: unit, integration, fault and deploy tests against real servers.
# The file list is built here (one sorted list, the same on every Node.js).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_PROMTOOL=1 bash scripts/setup.sh
source scripts/runtime.sh
mapfile -t files < <(find test -name '*.test.ts' -not -path '*/node_modules/*' | sort)
if [ "${#files[@]}" -eq 0 ]; then echo "no test files found" >&2; exit 1; fi
exec node --import tsx --test --test-reporter=spec --test-concurrency="${TEST_CONCURRENCY:-2}" --test-timeout=600000 "${files[@]}"
