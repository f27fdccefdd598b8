#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian machine (Node.js 22 into .tools/ when the
# machine's is older, see runtime.sh):
# npm packages, nats-server / redis-server from apt when they are missing, and (SETUP_PROMTOOL=1)
# promtool and prometheus unpacked from Debian's package into .tools/.
set -euo pipefail
cd "$(dirname "$0")/.."
# npm ci and everything after it on the project's Node.js runtime (Node 22 fetched into .tools/ when older).
source scripts/runtime.sh
need=()
[ -n "${NATS_SERVER_BIN:-}" ] || command -v nats-server >/dev/null 2>&1 || need+=(nats-server) # NATS_SERVER_BIN: that binary instead
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing with apt: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# promtool and prometheus (the alert/rule tests and the Prometheus end-to-end test): Debian's package is
# unpacked into .tools/prometheus, not installed, so no Prometheus service is enabled or started on the
# machine. Tests look there after PATH.
if [ "${SETUP_PROMTOOL:-0}" = "1" ] && ! command -v promtool >/dev/null 2>&1 && [ ! -x .tools/prometheus/usr/bin/promtool ]; then
  echo "unpacking Debian's prometheus package into .tools/prometheus (promtool, prometheus; nothing installed)"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  [ "${apt_updated:-0}" = "1" ] || $SUDO apt-get update -qq
  deb_dir="$(mktemp -d)"
  chmod a+rwx "$deb_dir" # apt downloads as its _apt user
  (cd "$deb_dir" && apt-get download -qq prometheus)
  rm -rf .tools/prometheus
  mkdir -p .tools/prometheus
  dpkg-deb -x "$deb_dir"/prometheus_*.deb .tools/prometheus
  rm -rf "$deb_dir"
  .tools/prometheus/usr/bin/promtool --version >/dev/null
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
