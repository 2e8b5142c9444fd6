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
. "$(dirname "$0")/apt-install.sh"
apt_install "redis-server is missing: installing it with apt-get (redis-server, redis-tools)" redis-server redis-tools
cat >&2 <<'MSG'
keyfleet needs redis-server and it is not installed.
  Debian/Ubuntu: sudo apt-get install -y redis-server
  macOS:         brew install redis
  or point KEYFLEET_REDIS_URL at a running Redis (make demo only).
MSG
exit 1
