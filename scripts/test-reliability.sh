#!/usr/bin/env bash
# The reliability scenarios at full size (KEYFLEET_RELIABILITY=full): every
# end-to-end test runs (the packages under internal/e2e), each fault
# scenario records a row, and each package prints the table of its rows at
# its end; they are gathered here. The full log is kept in $LOG.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${LOG:-$(mktemp -t keyfleet-reliability.XXXXXX.log)}
profile=${KEYFLEET_RELIABILITY:-full}
echo "reliability scenarios, $profile profile (log: $LOG)"
# -p 1: one package at a time, as the scenarios ran at full size before
# internal/e2e was split (make test runs the packages side by side at the
# short profile).
KEYFLEET_RELIABILITY=$profile go test -race -count=1 -p 1 -timeout 80m -v ./internal/e2e/... >"$LOG" 2>&1
code=$?
grep -E '^(--- FAIL|FAIL|panic:)' "$LOG" || true
# What each failing test said, so that a CI log explains a failure without
# the kept file: its messages (lines naming a _test.go line), then the last
# lines of its output. go test -v heads each test's output with
# "=== RUN|CONT|NAME <test>".
awk '
  FNR == NR { if ($1 == "---" && $2 == "FAIL:") failed[$3] = 1; next }
  /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
  /^ *--- (PASS|FAIL|SKIP):/ { next }
  (cur in failed) {
    if ($0 ~ /_test\.go:[0-9]+:/ && heads[cur]++ < 60) msg[cur] = msg[cur] $0 "\n"
    last[cur, (n[cur]++) % 80] = $0
  }
  END {
    for (t in failed) {
      printf "=== what %s said\n%s", t, msg[t]
      printf "=== the last lines of %s\n", t
      for (i = (n[t] > 80 ? n[t] - 80 : 0); i < n[t]; i++) print last[t, i % 80]
    }
  }' "$LOG" "$LOG"
sed -n '/^Reliability (/,/^$/p' "$LOG"
grep -E '^(ok|FAIL)\s' "$LOG"   # each package's result
exit $code
