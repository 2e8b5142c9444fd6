#!/usr/bin/env bash
# Make sure Chromium exists for the dashboard's browser tests
# (internal/dashboard drives it headless from Go), installing Debian's
# chromium package through apt when it is missing; else say how to get it.
set -euo pipefail
want="${KEYFLEET_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$want" ]; then
  exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install "chromium is missing: installing it with apt-get (for the dashboard's browser tests)" chromium
cat >&2 <<'MSG'
The dashboard's browser tests need Chromium at /usr/bin/chromium (or set KEYFLEET_CHROMIUM).
  Debian/Ubuntu: sudo apt-get install -y chromium
MSG
exit 1
