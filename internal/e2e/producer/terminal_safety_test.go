package producer

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// hostileScript writes terminal escapes to stderr: a window title (OSC
// ESC]0;pwned BEL), a colour (ESC[31m), a C1 CSI (U+009B, bytes C2 9B) and
// a bidi override (U+202E, bytes E2 80 AE), short enough to fit the
// 80 bytes of dlq list's error column. rej-* items then exit 77 (the key
// is refused: the line becomes the key's disabled reason), the others 65
// (a permanent failure: the text becomes the dead letter's error).
const hostileScript = `cat > /dev/null
line='\033]0;pwned\007\033[31m\302\2332J\342\200\256x'
case "$KEYFLEET_ITEM_ID" in
  rej-*) printf "key revoked $line\n" >&2; exit 77 ;;
esac
printf "a\n$line\n" >&2
exit 65
`

// escapedLine is what the producer shows of hostileScript's line.
const escapedLine = `\x1b]0;pwned\x07\x1b[31m\u{009b}2J\u{202e}x`

// assertTerminalSafe fails if out holds a byte or character a terminal
// acts on (other than line feeds): a C0 control, DEL, a C1 control, a bidi
// control, or bytes that are not UTF-8.
func assertTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%s: not valid UTF-8:\n%q", what, out)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("%s: raw control byte %#x at %d:\n%q", what, c, i, out)
		}
	}
	for _, r := range out {
		if (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			t.Fatalf("%s: raw %U:\n%q", what, r, out)
		}
	}
}

// assertEscaped fails unless out is terminal-safe and shows
// hostileScript's line escaped.
func assertEscaped(t *testing.T, what, out string) {
	t.Helper()
	assertTerminalSafe(t, what, out)
	if !strings.Contains(out, escapedLine) {
		t.Fatalf("%s lacks %s:\n%s", what, escapedLine, out)
	}
}

// Text a job writes (its stderr, as a dead letter's error and as a key's
// disabled reason) and IDs an input gives reach the operator's terminal
// with their control characters escaped: enqueue --wait, dlq list,
// status, creds list. The JSON outputs escape them their own way.
func TestTerminalSafetyOfJobText(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 1}`,
		Worker:      "concurrency: 1",
		Jobs: `exec:
  command: ["{{dir}}/hostile.sh"]
  timeout: 1m`,
		Env: []string{"KEY_A=sk-a"},
	})
	f.WriteScript("hostile.sh", hostileScript)
	f.StartWorker("w1")

	// An item ID with an ESC and a bidi override, and one plain.
	path := f.WriteInput("evil.jsonl", `{"id":"evil-\u001b[1m\u202e-1"}`+"\n"+`{"id":"evil-2"}`+"\n")
	r := f.Producer(nil, "enqueue", "--wait", "--batch", "evil", path)
	if r.Code != 1 || e2etest.WaitSummary(t, r.Stdout)["Failed"] != "2" {
		t.Fatalf("want 2 failed and exit 1:\n%s", r)
	}
	assertEscaped(t, "enqueue --wait", r.Stdout)
	assertTerminalSafe(t, "enqueue --wait (stderr)", r.Stderr)
	if !strings.Contains(r.Stdout, `- evil-\x1b[1m\u{202e}-1: `) {
		t.Fatalf("enqueue --wait: the failed item's ID is not shown escaped:\n%s", r.Stdout)
	}

	r = f.Producer(nil, "dlq", "list")
	if r.Code != 0 || !strings.Contains(r.Stdout, "2 dead letters") {
		t.Fatalf("dlq list:\n%s", r)
	}
	assertEscaped(t, "dlq list", r.Stdout)
	if !strings.Contains(r.Stdout, `evil-\x1b[1m\u{202e}-1`) || !strings.Contains(r.Stdout, "stderr: a "+escapedLine) {
		t.Fatalf("dlq list: want the ID escaped and the error on one line:\n%s", r.Stdout)
	}
	// Each record is one line of the table: header, two rows, the count.
	if n := strings.Count(r.Stdout, "\n"); n != 4 {
		t.Fatalf("dlq list: want 4 lines, got %d:\n%s", n, r.Stdout)
	}

	// --json is encoding/json's: ESC and BEL as \u001b and \u0007.
	r = f.Producer(nil, "dlq", "list", "--json")
	if r.Code != 0 || len(e2etest.ParseJSONArray(t, r.Stdout)) != 2 {
		t.Fatalf("dlq list --json:\n%s", r)
	}
	for i := 0; i < len(r.Stdout); i++ {
		if c := r.Stdout[i]; c < 0x20 && c != '\n' {
			t.Fatalf("dlq list --json: raw control byte %#x:\n%q", c, r.Stdout)
		}
	}
	if !strings.Contains(r.Stdout, `\u001b]0;pwned\u0007\u001b[31m`) {
		t.Fatalf("dlq list --json: want ESC and BEL escaped:\n%s", r.Stdout)
	}

	// Refused items: key-a is disabled, its reason the job's last line.
	path = f.WriteInput("rej.jsonl", e2etest.JSONLItems(3, `{"id":"rej-%s"}`))
	if r := f.Producer(nil, "enqueue", "--batch", "rej", path); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	pool := f.Pool()
	testutil.WaitFor(t, "key-a to be disabled", time.Minute, func() bool {
		st, err := pool.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Credentials) == 1 && st.Credentials[0].State == creds.StateDisabled
	})

	r = f.Producer(nil, "status")
	if r.Code != 0 {
		t.Fatalf("status:\n%s", r)
	}
	assertEscaped(t, "status", r.Stdout)
	if !strings.Contains(r.Stdout, `disabled: `) || !strings.Contains(r.Stdout, "key revoked "+escapedLine) {
		t.Fatalf("status: want key-a disabled with its reason escaped:\n%s", r.Stdout)
	}
	r = f.Producer(nil, "creds", "list")
	if r.Code != 0 {
		t.Fatalf("creds list:\n%s", r)
	}
	assertEscaped(t, "creds list", r.Stdout)
}
