#!/usr/bin/env bash
# One command on a fresh machine: install what is missing, then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/runtime.sh
exec npx tsx src/cli.ts demo "$@"
