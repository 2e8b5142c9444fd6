package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// evil is text a job or an API could send: colour, a window title (OSC),
// a C1 CSI, a bidi override, a stray byte and line breaks.
const evil = "\x1b[31mred\x1b]0;pwned\x07\u009b2J\u202eabc\xff\r\n\tend"

// checkTerminalSafe fails if out holds a raw C0 control other than line
// feed, DEL, a C1 control, a bidi override or a byte that is not UTF-8, or
// lacks the escaped forms of evil's ESC, BEL and C1 CSI.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%s: not valid UTF-8:\n%q", what, out)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("%s: raw byte %#x at %d:\n%q", what, c, i, out)
		}
	}
	for _, r := range out {
		if (r >= 0x80 && r <= 0x9f) || r == '\u202e' {
			t.Fatalf("%s: raw %U:\n%q", what, r, out)
		}
	}
	for _, want := range []string{`\x1b[31mred`, `\x1b]0;pwned\x07`, `\u{009b}2J`, `\u{202e}abc\xff`} {
		if !strings.Contains(out, want) {
			t.Fatalf("%s: lacks %s:\n%s", what, want, out)
		}
	}
}

// Every text field of the status report reaches the terminal escaped:
// worker IDs and hosts, credential IDs, disabled and rest reasons.
func TestStatusTextEscapesControls(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Minute)
	rep := status.Report{
		At:       now,
		Stream:   status.Stream{Name: "KF" + evil},
		Consumer: status.Consumer{Name: "workers" + evil},
		Workers: []status.Worker{{ID: "w1" + evil, Host: "host" + evil, State: "running", Version: "v" + evil,
			Kinds: []string{"exec" + evil}, LastSeen: now}},
		Pool: status.Pool{Name: "default" + evil, At: now, Credentials: []status.Credential{
			{ID: "key-a" + evil, State: creds.StateDisabled, DisabledReason: "revoked: " + evil, DisabledAt: &now},
			{ID: "key-b", State: creds.StateCooling, CoolingUntil: &later, RestCause: "header " + evil, CoolingReason: "429: " + evil},
		}},
	}
	var b bytes.Buffer
	printStatus(&b, rep, 30*time.Second)
	out := b.String()
	checkTerminalSafe(t, "status", out)
	for _, want := range []string{`w1\x1b[31mred`, `host\x1b[31mred`, `key-a\x1b[31mred`, `disabled: revoked: \x1b[31mred`,
		`[header \x1b[31mred`, `: 429: \x1b[31mred`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %s:\n%s", want, out)
		}
	}
	// The table keeps one line per row: two header lines, two workers' and
	// pool's header rows, one row each.
	if !strings.Contains(out, "\n  key-b ") {
		t.Errorf("a reason's line break broke the pool table:\n%s", out)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"exit 65; stderr: broken", 80, "exit 65; stderr: broken"},
		{"line 1\nline 2\r\n\tx", 80, "line 1 line 2   x"},
		{"\x1b[31mred", 80, `\x1b[31mred`},
		{"abcdef", 3, "abc…"},
		// A cut never splits a character.
		{"aé", 2, "a…"},
		{"a🙂", 4, "a…"},
		{"a🙂", 5, "a🙂"},
		// Stray bytes are escaped, not cut into.
		{"\xff\xff\xff", 2, `\xff\xff…`},
	} {
		if got := oneLine(tc.in, tc.n); got != tc.want {
			t.Errorf("oneLine(%q, %d): want %q, got %q", tc.in, tc.n, tc.want, got)
		}
	}
}

// An error that quotes text from an item or a server is printed escaped;
// an error of several lines (the configuration's problems) keeps them.
func TestErrorsEscapeControls(t *testing.T) {
	var out, errb bytes.Buffer
	code := ProducerMain([]string{"status", "--" + evil}, strings.NewReader(""), &out, &errb)
	if code != 2 {
		t.Fatalf("want exit 2 for an unknown flag, got %d:\n%s", code, errb.String())
	}
	checkTerminalSafe(t, "unknown flag", errb.String())

	cfg := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(cfg, []byte("pool:\n  name: \"\"\n  cooldown: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := ProducerMain([]string{"status", "--config", cfg}, strings.NewReader(""), &out, &errb); code != 2 {
		t.Fatalf("want exit 2 for a bad config, got %d:\n%s", code, errb.String())
	}
	if strings.Count(strings.TrimSpace(errb.String()), "\n") < 1 {
		t.Fatalf("want the configuration's problems one a line:\n%s", errb.String())
	}
}

// The --json outputs are encoding/json's: ESC, BEL and every other C0
// control are escaped in them (\u001b), whatever field holds them.
func TestJSONOutputsEscapeControls(t *testing.T) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as dlq list --json does
	d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "i" + evil, Batch: "b" + evil, Reason: "r", Error: evil}}
	if err := enc.Encode(d); err != nil {
		t.Fatal(err)
	}
	rep := status.Report{Workers: []status.Worker{{ID: evil}}, Pool: status.Pool{Credentials: []status.Credential{{ID: evil, DisabledReason: evil}}}}
	if err := enc.Encode(rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c < 0x20 && c != '\n' {
			t.Fatalf("raw byte %#x in JSON:\n%q", c, out)
		}
	}
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, `\u001b[31mred\u001b]0;pwned\u0007`) {
		t.Fatalf("want ESC and BEL as \\u001b and \\u0007, two lines:\n%s", out)
	}
}
