package termsafe_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"plain", "exec: exit status 65; stderr: item is broken", "exec: exit status 65; stderr: item is broken"},
		{"printable unicode", "clé épuisée — 配额 🙂 ü", "clé épuisée — 配额 🙂 ü"},
		{"backslash kept", `C:\path\x1b`, `C:\path\x1b`},
		{"SGR colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"OSC title", "\x1b]0;pwned\x07after", `\x1b]0;pwned\x07after`},
		{"OSC 8 link with ST", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", `\x1b]8;;http://evil\x1b\click\x1b]8;;\x1b\`},
		{"layout", "a\tb\nc\r\nd", `a\tb\nc\r\nd`},
		{"NUL and DEL", "\x00x\x7f", `\x00x\x7f`},
		{"C1 CSI", "\u009b31mred", `\u{009b}31mred`},
		{"C1 bounds", "\u0080\u009f\u00a0", `\u{0080}\u{009f}` + "\u00a0"},
		{"invalid bytes", "ok\xff\xfe\x9bend", `ok\xff\xfe\x9bend`},
		{"truncated rune", "caf\xc3", `caf\xc3`},
		{"valid U+FFFD kept", "\ufffd", "\ufffd"},
		{"bidi override", "invoice\u202egpj.exe", `invoice\u{202e}gpj.exe`},
		{"bidi all", "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c",
			`\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{200e}\u{200f}\u{061c}`},
		{"line separators", "a\u2028b\u2029c", `a\u{2028}b\u{2029}c`},
		{"neighbours kept", "\u2027\u202f\u2065\u206a\u200d", "\u2027\u202f\u2065\u206a\u200d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := termsafe.String(tc.in); got != tc.want {
				t.Errorf("String(%q):\nwant %q\ngot  %q", tc.in, tc.want, got)
			}
		})
	}
}

func TestLines(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"config: 2 problems\npool.name: empty\nredis.url: bad", "config: 2 problems\npool.name: empty\nredis.url: bad"},
		{"a\r\nb\tc\n\x1b[2J\u202e\n", `a\r` + "\n" + `b\tc` + "\n" + `\x1b[2J\u{202e}` + "\n"},
	} {
		if got := termsafe.Lines(tc.in); got != tc.want {
			t.Errorf("Lines(%q):\nwant %q\ngot  %q", tc.in, tc.want, got)
		}
	}
}

// Text that needs no escaping comes back as it is, without an allocation.
func TestStringSafeDoesNotAllocate(t *testing.T) {
	in := strings.Repeat("key-a: 429 Too Many Requests — réessayez ", 20)
	var out string
	for name, f := range map[string]func(string) string{"String": termsafe.String, "Lines": termsafe.Lines} {
		allocs := testing.AllocsPerRun(100, func() { out = f(in) })
		if allocs != 0 {
			t.Errorf("%s: want 0 allocations for safe text, got %.0f", name, allocs)
		}
		if out != in {
			t.Errorf("%s: safe text changed", name)
		}
	}
}

// checkSafe fails unless out is valid UTF-8 without a C0 control, DEL, C1
// control, bidi control or line separator.
func checkSafe(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("String(%q) = %q: not valid UTF-8", in, out)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; c < 0x20 || c == 0x7f {
			t.Fatalf("String(%q) = %q: byte %#x at %d", in, out, c, i)
		}
	}
	for i, r := range out {
		if (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) ||
			r == 0x200e || r == 0x200f || r == 0x061c || r == 0x2028 || r == 0x2029 {
			t.Fatalf("String(%q) = %q: rune %U at %d", in, out, r, i)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[31mred\x1b[0m", "\x1b]0;pwned\x07", "\u009b2J", "\u202eevil",
		"\xff\xc3", "a\tb\nc\r", "\u2028", "é\x80", strings.Repeat("\x1b", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := termsafe.String(in)
		checkSafe(t, in, out)
		if again := termsafe.String(out); again != out {
			t.Fatalf("not stable: String(%q) = %q, then %q", in, out, again)
		}
		if len(out) < len(in) {
			t.Fatalf("String(%q) = %q dropped bytes", in, out)
		}
		// Lines escapes each line as String does and keeps the line feeds.
		var want []string
		for _, line := range strings.Split(in, "\n") {
			want = append(want, termsafe.String(line))
		}
		if got := termsafe.Lines(in); got != strings.Join(want, "\n") {
			t.Fatalf("Lines(%q) = %q, want %q", in, got, strings.Join(want, "\n"))
		}
		// Text of safe characters only is returned unchanged.
		safe := utf8.ValidString(in)
		for i := 0; i < len(in) && safe; i++ {
			safe = in[i] >= 0x20 && in[i] != 0x7f
		}
		if safe {
			for _, r := range in {
				if r >= 0x80 && (r <= 0x9f || r == 0x061c || r == 0x200e || r == 0x200f ||
					(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x2028 || r == 0x2029) {
					safe = false
				}
			}
		}
		if safe && out != in {
			t.Fatalf("safe text changed: %q became %q", in, out)
		}
	})
}

// The --json outputs are left to encoding/json: it must escape every C0
// control (ESC as \u001b), so that JSON printed on a terminal cannot drive
// it with them.
func TestJSONEscapesC0Controls(t *testing.T) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as dlq list --json and results do
	var all []byte
	for c := 0; c < 0x20; c++ {
		all = append(all, byte(c))
	}
	if err := enc.Encode(map[string]string{"error": "\x1b[31mred\x1b]0;pwned\x07" + string(all)}); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(b.String(), "\n")
	for i := 0; i < len(out); i++ {
		if out[i] < 0x20 {
			t.Fatalf("encoding/json wrote the raw byte %#x: %q", out[i], out)
		}
	}
	if !strings.Contains(out, `\u001b[31mred\u001b]0;pwned\u0007`) {
		t.Fatalf("want ESC and BEL as \\u001b and \\u0007, got %s", out)
	}
}

// JSON keeps the value and escapes what a terminal acts on.
func TestJSON(t *testing.T) {
	in := []byte(`{"output":"a\u009b31mb` + "\u202e" + `c\u2028","e":"ok é 日本"}`)
	in = []byte(strings.ReplaceAll(string(in), `\u009b`, "\u009b"))
	out := termsafe.JSON(in)
	want := `{"output":"a\u009b31mb\u202ec\u2028","e":"ok é 日本"}`
	if string(out) != want {
		t.Fatalf("JSON(%q) = %q, want %q", in, out, want)
	}
	var a, b map[string]string
	if err := json.Unmarshal(in, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil || a["output"] != b["output"] || a["e"] != b["e"] {
		t.Fatalf("the value changed: %q vs %q (%v)", a, b, err)
	}
	plain := []byte(`{"a":"b"}`)
	if got := termsafe.JSON(plain); &got[0] != &plain[0] {
		t.Error("JSON copied text that needs no escaping")
	}
}
