package secret_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// A secret with characters that every encoding escapes: '/' and '+'
// (URL, and '/' '+' in the base64 it yields), '&' '<' '>' '"' (JSON, with
// and without HTML escaping), ' ' and '%' (URL).
const tricky = `sk-live/Ab+9&<z>"q 50%~end`

// encodings are the four base64 encodings a job may use.
var encodings = map[string]*base64.Encoding{
	"std": base64.StdEncoding, "raw-std": base64.RawStdEncoding,
	"url": base64.URLEncoding, "raw-url": base64.RawURLEncoding,
}

// jsonBody is the inside of the JSON string for v, with or without HTML
// escaping.
func jsonBody(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	return strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), `"`)[1:]
}

var hexEscape = regexp.MustCompile(`%[0-9A-F]{2}`)

// formsOf is the test's own list of the forms in which a secret must not
// survive. The base64 core of each alignment is found by encoding the
// secret between two fillers that differ in every bit and keeping the
// characters that do not change: those depend on the secret alone.
func formsOf(v string) []string {
	out := []string{v, url.QueryEscape(v), url.PathEscape(v), jsonBody(v, true), jsonBody(v, false)}
	for _, esc := range out[1:3] {
		out = append(out, hexEscape.ReplaceAllStringFunc(esc, strings.ToLower))
	}
	if len(v) < 7 {
		return out // see minBase64Core: cores under 8 characters are not matched
	}
	for k := range 3 {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			a := enc.EncodeToString([]byte(strings.Repeat("\x00", k) + v + "\x00\x00"))
			b := enc.EncodeToString([]byte(strings.Repeat("\xff", k) + v + "\xff\xff"))
			from, to := 0, len(a)
			for a[from] != b[from] {
				from++
			}
			for a[to-1] != b[to-1] {
				to--
			}
			out = append(out, a[from:to])
		}
	}
	return out
}

// leaked returns a form of one of secrets that text still holds.
func leaked(text string, secrets ...string) string {
	for _, s := range secrets {
		for _, f := range formsOf(s) {
			if strings.Contains(text, f) {
				return f
			}
		}
	}
	return ""
}

func TestScrubForms(t *testing.T) {
	sc := secret.NewScrubber(secret.New(tricky))
	b64 := func(enc string, s string) string { return encodings[enc].EncodeToString([]byte(s)) }
	cases := []struct{ name, in, want string }{
		{"raw", "key=" + tricky + ";", "key=[REDACTED];"},
		{"query escape", "GET /x?k=" + url.QueryEscape(tricky) + "&n=1", "GET /x?k=[REDACTED]&n=1"},
		{"path escape", "GET /keys/" + url.PathEscape(tricky) + "/usage", "GET /keys/[REDACTED]/usage"},
		{"query escape, lower-case hex", "k=" + hexEscape.ReplaceAllStringFunc(url.QueryEscape(tricky), strings.ToLower) + "&",
			"k=[REDACTED]&"},
		{"path escape, lower-case hex", "/" + hexEscape.ReplaceAllStringFunc(url.PathEscape(tricky), strings.ToLower) + "/",
			"/[REDACTED]/"},
		{"json", `{"key":"` + jsonBody(tricky, true) + `"}`, `{"key":"[REDACTED]"}`},
		{"json without HTML escaping", `{"key":"` + jsonBody(tricky, false) + `"}`, `{"key":"[REDACTED]"}`},
		{"base64 std", "token " + b64("std", tricky) + " ok", "token [REDACTED] ok"},
		{"base64 url", "token " + b64("url", tricky) + " ok", "token [REDACTED] ok"},
		{"base64 std unpadded", "token " + b64("raw-std", tricky) + " ok", "token [REDACTED] ok"},
		{"base64 url unpadded", "token " + b64("raw-url", tricky) + " ok", "token [REDACTED] ok"},
		{"base64 in a query value", "GET /x?auth=" + b64("url", "u:"+tricky) + "&n=1", "GET /x?auth=[REDACTED]&n=1"},
		{"every form on one line", tricky + " " + url.QueryEscape(tricky) + " " + jsonBody(tricky, true) + " " + b64("std", tricky),
			"[REDACTED] [REDACTED] [REDACTED] [REDACTED]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sc.String(c.in); got != c.want {
				t.Errorf("String(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
			if got := string(sc.Bytes([]byte(c.in))); got != c.want {
				t.Errorf("Bytes(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
			if !sc.Contains(c.in) {
				t.Errorf("Contains(%q) = false", c.in)
			}
		})
	}
}

// curl -v -u user:SECRET prints the secret inside base64("user:SECRET"):
// whatever the length of the user part, so whatever the alignment, the
// whole credential goes.
func TestScrubCurlBasicHeader(t *testing.T) {
	for _, sec := range []string{"sk-0123456789abcdefghij", "sk-0123456789abcdefghijk", "sk-0123456789abcdefghijkl", "Ab?>~~~>?/+="} {
		sc := secret.NewScrubber(secret.New(sec))
		for n := 0; n <= 5; n++ {
			user := "uname"[:n]
			for name, enc := range encodings {
				cred := enc.EncodeToString([]byte(user + ":" + sec))
				in := "> GET /v1 HTTP/1.1\r\n> Authorization: Basic " + cred + "\r\n> Accept: */*\r\n"
				want := "> GET /v1 HTTP/1.1\r\n> Authorization: Basic [REDACTED]\r\n> Accept: */*\r\n"
				if got := sc.String(in); got != want {
					t.Errorf("secret %q, user %q, %s: got %q, want %q", sec, user, name, got, want)
				}
			}
		}
	}
}

// Forms of the secrets of 7 bytes and more are caught in base64 at every
// alignment; shorter ones (see minBase64Core) only in the other forms.
func TestScrubBase64Lengths(t *testing.T) {
	for n := 4; n <= 12; n++ {
		sec := "Zq7#xV9!pL3$"[:n]
		sc := secret.NewScrubber(secret.New(sec))
		for k := range 3 {
			in := base64.StdEncoding.EncodeToString([]byte("ab"[:k] + sec))
			got := sc.String("x " + in + " y")
			if n >= 7 && got != "x [REDACTED] y" {
				t.Errorf("%d-byte secret at offset %d: got %q", n, k, got)
			}
			if n < 7 && got != "x "+in+" y" {
				t.Errorf("%d-byte secret at offset %d: base64 matched below the minimum core: %q", n, k, got)
			}
		}
		if got := sc.String("x " + url.QueryEscape(sec) + " y"); got != "x [REDACTED] y" {
			t.Errorf("%d-byte secret, query-escaped: got %q", n, got)
		}
	}
	if got := secret.NewScrubber(secret.New("abc")).String("abc YWJj"); got != "abc YWJj" {
		t.Errorf("a 3-byte secret must be ignored: got %q", got)
	}
}

func TestScrubOverlappingSecrets(t *testing.T) {
	sc := secret.NewScrubber(secret.New("abcdefgh"), secret.New("efghijkl"), secret.New("sk-live-1234567"),
		secret.New("live-1234"), secret.New("ZZZZ"))
	cases := []struct{ in, want string }{
		{"xxabcdefghijklxx", "xx[REDACTED]xx"},       // two that overlap: one redaction
		{"a sk-live-1234567 b", "a [REDACTED] b"},    // one inside another
		{"a live-1234 b", "a [REDACTED] b"},          // the inner one alone
		{"ZZZZZZZZZ", "[REDACTED]"},                  // a secret repeated over itself
		{"abcdefghabcdefgh", "[REDACTED][REDACTED]"}, // side by side
		{"sk-live-1234567abcdefgh", "[REDACTED][REDACTED]"},
		{"nothing here", "nothing here"},
	}
	for _, c := range cases {
		if got := sc.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Text without secrets comes back unchanged, and Bytes hands back the
// very slice it was given: no copy on the common path.
func TestScrubLeavesCleanTextAlone(t *testing.T) {
	sc := secret.NewScrubber(secret.New(tricky), secret.New("sk-live-0123456789abcdef"))
	for _, in := range []string{
		"",
		"plain text",
		"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:other-password")),
		"sk-live-0123456789abcdeX sk-live/Ab+9&<z>\"q 50%~en",      // near misses
		url.QueryEscape("sk-live-0123456789abcde") + " [REDACTED]", // a marker from an earlier scrub
		strings.Repeat("sk-live-", 1000),
	} {
		if got := sc.String(in); got != in {
			t.Errorf("String(%q) = %q", in, got)
		}
		if sc.Contains(in) {
			t.Errorf("Contains(%q) = true", in)
		}
		b := []byte(in + "!")
		if out := sc.Bytes(b); &out[0] != &b[0] || len(out) != len(b) {
			t.Errorf("Bytes(%q) copied text that holds no secret", b)
		}
	}
	var zero secret.Scrubber
	if zero.String(tricky) != tricky || zero.Contains(tricky) || zero.MaxLen() != 0 {
		t.Error("the zero Scrubber must scrub nothing")
	}
}

// MaxLen covers the longest form, not only the raw secret.
func TestScrubMaxLen(t *testing.T) {
	sc := secret.NewScrubber(secret.New(tricky))
	longest := 0
	for _, f := range formsOf(tricky) {
		longest = max(longest, len(f))
	}
	if longest <= len(tricky) {
		t.Fatalf("test set-up: the longest form (%d) should be longer than the secret (%d)", longest, len(tricky))
	}
	if sc.MaxLen() != longest {
		t.Fatalf("MaxLen = %d, want %d (the longest form)", sc.MaxLen(), longest)
	}
}

// writeChunks writes text to a Writer of sc in chunks of the given sizes
// (cycled) and returns what came out.
func writeChunks(t *testing.T, sc *secret.Scrubber, text string, sizes ...int) string {
	t.Helper()
	var out strings.Builder
	w := sc.Writer(&out)
	for i, j := 0, 0; i < len(text); j++ {
		n := min(sizes[j%len(sizes)], len(text)-i)
		if m, err := w.Write([]byte(text[i : i+n])); err != nil || m != n {
			t.Fatalf("Write = %d, %v", m, err)
		}
		i += n
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// The stream writer catches encoded forms however the writes split them.
func TestScrubWriterEncodedSplit(t *testing.T) {
	sc := secret.NewScrubber(secret.New(tricky), secret.New("other-secret-xyz"))
	// Forms matched exactly: the writer gives what String gives.
	text := "a " + url.QueryEscape(tricky) + " b {\"k\":\"" + jsonBody(tricky, true) + "\"} c " +
		url.PathEscape(tricky) + " d other-secret-xyz e"
	want := sc.String(text)
	if want != "a [REDACTED] b {\"k\":\"[REDACTED]\"} c [REDACTED] d [REDACTED] e" {
		t.Fatalf("String: %q", want)
	}
	for chunk := 1; chunk <= len(text); chunk++ {
		if got := writeChunks(t, sc, text, chunk); got != want {
			t.Fatalf("chunks of %d: got %q, want %q", chunk, got, want)
		}
	}

	// Base64: a run of the encoded credential that was passed on before
	// the secret's own characters arrived may stay (it encodes the user
	// name), but nothing from the character before the secret's core to
	// the end of the run, padding included. With an alphanumeric secret
	// the longest form is a base64 core, so the writer's hold-back is
	// tested at its edge.
	for _, sec := range []string{tricky, "sk0123456789abcdefghijklmn"} {
		sc := secret.NewScrubber(secret.New(sec))
		for n := 0; n <= 5; n++ {
			user := "uname"[:n]
			for name, enc := range encodings {
				cred := enc.EncodeToString([]byte(user + ":" + sec))
				head, tail := "> Authorization: Basic ", "\r\n> Accept: */*\r\n"
				text := head + cred + tail
				// The character holding the first bits of the secret:
				// the core's first, or the partial one before it.
				first := len(head) + (len(user)+1)*8/6
				splits := [][]int{{1}, {2}, {3}, {5, 1}, {7}, {64}}
				for i := 1; i < len(head)+len(cred)+2; i++ {
					splits = append(splits, []int{i, len(text)})
				}
				for _, sizes := range splits {
					got := writeChunks(t, sc, text, sizes...)
					kept, ok := strings.CutSuffix(got, secret.Redacted+tail)
					if !ok || !strings.HasPrefix(text, kept) || len(kept) < len(head) || len(kept) > first {
						t.Fatalf("secret %q, user %q, %s, writes of %v: got %q from %q", sec, user, name, sizes, got, text)
					}
				}
			}
		}
	}
}

// reference scrubs the slow, obvious way: every occurrence of every form,
// a base64 core widened to its run, overlapping parts merged.
func reference(text string, secrets []string) string {
	type span struct{ from, to int }
	var spans []span
	isB64 := func(c byte) bool {
		return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("+/-_", c) >= 0
	}
	for _, s := range secrets {
		if len(s) < 4 {
			continue
		}
		forms := formsOf(s)
		for fi, f := range forms {
			for i := 0; i+len(f) <= len(text); i++ {
				if text[i:i+len(f)] != f {
					continue
				}
				from, to := i, i+len(f)
				if fi >= 7 { // the base64 cores
					for from > 0 && isB64(text[from-1]) {
						from--
					}
					for to < len(text) && isB64(text[to]) {
						to++
					}
					for to < len(text) && text[to] == '=' {
						to++
					}
				}
				spans = append(spans, span{from, to})
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var b strings.Builder
	at, end := 0, -1 // the current merged span starts at 'at'... when end >= 0
	for _, sp := range spans {
		if end >= 0 && sp.from < end {
			end = max(end, sp.to)
			continue
		}
		if end >= 0 {
			b.WriteString(secret.Redacted)
			at = end
		}
		b.WriteString(text[at:sp.from])
		at, end = sp.from, sp.to
	}
	if end >= 0 {
		b.WriteString(secret.Redacted)
		at = end
	}
	b.WriteString(text[at:])
	return b.String()
}

// checkScrub is the property: String and Bytes agree with reference and
// leave no form of any secret; the Writer, however it is fed, leaves none
// either.
func checkScrub(t *testing.T, text string, secrets []string, sizes []int) {
	t.Helper()
	ss := make([]secret.Secret, len(secrets))
	for i, s := range secrets {
		ss[i] = secret.New(s)
	}
	sc := secret.NewScrubber(ss...)
	var long []string // the secrets that are scrubbed
	for _, s := range secrets {
		if len(s) >= 4 {
			long = append(long, s)
		}
	}
	got := sc.String(text)
	if want := reference(text, secrets); got != want {
		t.Fatalf("secrets %q, text %q:\n got %q\nwant %q", secrets, text, got, want)
	}
	if b := string(sc.Bytes([]byte(text))); b != got {
		t.Fatalf("Bytes %q, String %q", b, got)
	}
	if f := leaked(got, long...); f != "" {
		t.Fatalf("secrets %q: %q survives in %q", secrets, f, got)
	}
	if sc.Contains(got) || sc.Contains(text) != (got != text) {
		t.Fatalf("Contains disagrees with String for %q", text)
	}
	if w := writeChunks(t, sc, text, sizes...); leaked(w, long...) != "" {
		t.Fatalf("secrets %q, writes of %v: %q survives in %q", secrets, sizes, leaked(w, long...), w)
	}
}

// randomCase builds secrets from a small alphabet (so that they overlap
// and repeat) and a text that holds them in random forms with random
// neighbours. The alphabet has no '[' or ']', the marker's brackets: a
// secret holding them could be made anew from a marker and its
// neighbours, which no scrubber can prevent.
func randomCase(rng *rand.Rand) (string, []string, []int) {
	const alphabet = "abcAB01 /+=%&<\"é-_"
	secrets := make([]string, 1+rng.IntN(4))
	for i := range secrets {
		b := make([]byte, 3+rng.IntN(12))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		secrets[i] = string(b)
	}
	var text strings.Builder
	for range 1 + rng.IntN(8) {
		for range rng.IntN(6) {
			text.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		s := secrets[rng.IntN(len(secrets))]
		switch rng.IntN(6) {
		case 0:
			text.WriteString(s)
		case 1:
			text.WriteString(url.QueryEscape(s))
		case 2:
			text.WriteString(hexEscape.ReplaceAllStringFunc(url.PathEscape(s), strings.ToLower))
		case 3:
			text.WriteString(jsonBody(s, rng.IntN(2) == 0))
		default:
			enc := []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding}[rng.IntN(4)]
			text.WriteString(enc.EncodeToString([]byte("user:"[:rng.IntN(6)] + s)))
		}
	}
	sizes := []int{1 + rng.IntN(20), 1 + rng.IntN(3)}
	return text.String(), secrets, sizes
}

func TestScrubRandomTexts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 3000 {
		text, secrets, sizes := randomCase(rng)
		checkScrub(t, text, secrets, sizes)
	}
}

// FuzzScrub checks the same property on inputs the fuzzer makes: go test
// runs the seeds, go test -fuzz FuzzScrub explores.
func FuzzScrub(f *testing.F) {
	f.Add("x sk-live/Ab+9 y", "sk-live/Ab+9", "other", uint8(3))
	f.Add("Basic dXNlcjpzay1saXZlL0FiKzk= ok", "sk-live/Ab+9", "zzzz", uint8(1))
	f.Add("abcdefghijkl", "abcdefgh", "efghijkl", uint8(5))
	f.Add("%2Fa%2fb", "/a/b", "a/b/", uint8(2))
	f.Fuzz(func(t *testing.T, text, s1, s2 string, chunk uint8) {
		for _, s := range []string{s1, s2} {
			if strings.ContainsAny(s, "[]") || len(s) > 64 {
				t.Skip("see randomCase")
			}
		}
		// Put the secrets into the text in some forms, too.
		text += " " + base64.StdEncoding.EncodeToString([]byte("u:"+s1)) + " " + url.QueryEscape(s2) + " " + s2
		checkScrub(t, text, []string{s1, s2}, []int{int(chunk%32) + 1})
	})
}

func ExampleScrubber() {
	sc := secret.NewScrubber(secret.New("sk-live-0123456789"))
	fmt.Println(sc.String("curl: Authorization: Basic " +
		base64.StdEncoding.EncodeToString([]byte("me:sk-live-0123456789"))))
	fmt.Println(sc.String(`{"url":"https://api/x?key=sk-live-0123456789"}`))
	// Output:
	// curl: Authorization: Basic [REDACTED]
	// {"url":"https://api/x?key=[REDACTED]"}
}
