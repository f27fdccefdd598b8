#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian machine with Node 20:
# npm packages, and nats-server / redis-server / promtool from apt when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${SETUP_PROMTOOL:-0}" = "1" ] && ! command -v promtool >/dev/null 2>&1; then need+=(prometheus); fi
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing with apt: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
