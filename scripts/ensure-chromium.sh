#!/usr/bin/env bash
# Make sure Chromium exists for the dashboard's browser tests
# (internal/dashboard drives it headless from Go), installing Debian's
# chromium package through apt when it is missing; else say how to get it.
set -euo pipefail
want="${KEYFLEET_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$want" ]; then
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
  echo "chromium is missing: installing it with apt-get (for the dashboard's browser tests)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  exit 0
fi
cat >&2 <<'MSG'
The dashboard's browser tests need Chromium at /usr/bin/chromium (or set KEYFLEET_CHROMIUM).
  Debian/Ubuntu: sudo apt-get install -y chromium
MSG
exit 1
