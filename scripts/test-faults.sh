#!/usr/bin/env bash
# The fault tests, one file at a time, then a table of what each fault did to the data.
#   npm run test:faults              short form (what CI runs; each scenario well under a minute)
#   npm run test:faults -- --long    minutes per scenario, more messages, randomized timing
# Exit code: the test run's (the table is printed either way).
set -uo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    --long) export FAULTS_LONG=1 ;;
    *) echo "usage: npm run test:faults [-- --long]" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh || exit $?
source scripts/runtime.sh
# The file list is built here (one sorted list, the same on every Node.js).
mapfile -t files < <(find test/faults -name '*.test.ts' | sort)
if [ "${#files[@]}" -eq 0 ]; then echo "no fault tests found" >&2; exit 1; fi
FAULTS_REPORT="$(mktemp "${TMPDIR:-/tmp}/fault-report-XXXXXX.jsonl")"
export FAULTS_REPORT
trap 'rm -f "$FAULTS_REPORT"' EXIT
node --import tsx --test --test-reporter=spec --test-concurrency=1 --test-timeout=1800000 "${files[@]}"
code=$?
echo
npx tsx scripts/fault-table.ts "$FAULTS_REPORT" || echo "(could not print the fault table)" >&2
exit "$code"
