#!/usr/bin/env bash
# Runs a command with the project's Node.js runtime first on PATH (scripts/runtime.sh): `npm run bench`
# and the other npm scripts that run code go through it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/runtime.sh
exec "$@"
