#!/usr/bin/env bash
# Make sure redis-server (and redis-cli) exist, installing them through apt
# when they are missing and that is possible; else say how to get them.
# Skipped when KEYFLEET_REDIS_URL points at a running Redis (make demo).
set -euo pipefail
if [ "${1:-}" = "--if-needed" ] && [ -n "${KEYFLEET_REDIS_URL:-}" ]; then
  exit 0
fi
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
  else
    SUDO="none"
  fi
fi
if [ "$SUDO" != "none" ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is missing: installing it with apt-get (redis-server, redis-tools)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
  exit 0
fi
cat >&2 <<'MSG'
keyfleet needs redis-server and it is not installed.
  Debian/Ubuntu: sudo apt-get install -y redis-server
  macOS:         brew install redis
  or point KEYFLEET_REDIS_URL at a running Redis (make demo only).
MSG
exit 1
