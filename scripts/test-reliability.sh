#!/usr/bin/env bash
# The reliability scenarios at full size (KEYFLEET_RELIABILITY=full): every
# end-to-end test runs, each fault scenario records a row, and the table is
# printed at the end. The full log is kept in $LOG.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${LOG:-$(mktemp -t keyfleet-reliability.XXXXXX.log)}
profile=${KEYFLEET_RELIABILITY:-full}
echo "reliability scenarios, $profile profile (log: $LOG)"
KEYFLEET_RELIABILITY=$profile go test -race -count=1 -timeout 80m -v ./internal/e2e >"$LOG" 2>&1
code=$?
grep -E '^(--- FAIL|FAIL|panic:)' "$LOG" || true
sed -n '/^Reliability (/,/^$/p' "$LOG"
tail -1 "$LOG"
exit $code
