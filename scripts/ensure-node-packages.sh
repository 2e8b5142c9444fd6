#!/usr/bin/env bash
# Install the npm packages the tests drive the stand-in APIs and the
# examples with (the providers' official SDKs), from their lock files,
# when node_modules is missing or older than its lock file. Needs node
# and npm (and the npm registry the first time); says how to get them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  # apt_install ends its shell: a subshell, so that this script goes on.
  (. scripts/apt-install.sh
   apt_install "node is missing: installing nodejs and npm with apt-get (the tests drive the official OpenAI and Anthropic SDKs)" nodejs npm)
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "keyfleet's tests need node and npm (Node.js 20 or later): the official SDK checks and examples/node run on them." >&2
  exit 1
fi
for dir in internal/fakeapi/sdkcheck internal/e2e/gateway/sdk examples/node; do
  [ -f "$dir/package-lock.json" ] || continue
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "installing the npm packages of $dir (npm ci)" >&2
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
  fi
done
