#!/usr/bin/env bash
# The chaos soak on its own: a seeded random schedule of every fault the fault matrix knows.
#   npm run test:chaos                           a random seed (printed), 3 minutes
#   npm run test:chaos -- --seed N --minutes M   that schedule again, that long
#   npm run test:chaos -- --order strict         the link with `to.order: strict` (no reorder allowed at all)
# The same seed and length give the same schedule (test/faults/chaos/schedule.ts); `npm test` runs
# seed 21 for 1.5 minutes (every fault kind once).
set -uo pipefail
cd "$(dirname "$0")/.."
seed="$(( (RANDOM << 15) | RANDOM ))"
minutes=3
order=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="${2:?--seed takes a number}"; shift 2 ;;
    --minutes) minutes="${2:?--minutes takes a number}"; shift 2 ;;
    --order) order="${2:?--order takes strict}"; shift 2 ;;
    *) echo "usage: npm run test:chaos [-- --seed N] [--minutes M] [--order strict]" >&2; exit 2 ;;
  esac
done
if ! [[ "$seed" =~ ^[0-9]+$ ]] || ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "test:chaos: --seed takes a whole number and --minutes a number (got seed '$seed', minutes '$minutes')" >&2
  exit 2
fi
if [ -n "$order" ] && [ "$order" != "strict" ]; then
  echo "test:chaos: --order takes strict (got '$order')" >&2
  exit 2
fi
bash scripts/setup.sh || exit $?
source scripts/runtime.sh
echo "chaos soak: seed $seed, $minutes minutes${order:+, to.order $order}"
# The soak's own length, plus settling and setup.
timeout_ms="$(awk -v m="$minutes" 'BEGIN { printf "%d", (m * 60 + 600) * 1000 }')"
CHAOS_SEED="$seed" CHAOS_MINUTES="$minutes" CHAOS_ORDER="$order" exec node --import tsx --test --test-reporter=spec --test-concurrency=1 --test-timeout="$timeout_ms" test/faults/chaos.test.ts
