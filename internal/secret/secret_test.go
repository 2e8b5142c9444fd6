package secret_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/secret"
)

func TestSecretNeverFormats(t *testing.T) {
	s := secret.New("sk-live-123456")
	js, err := json.Marshal(struct{ S secret.Secret }{s})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q", s, s, s, s, s), string(js)} {
		if strings.Contains(out, "sk-live") {
			t.Fatalf("secret leaked: %s", out)
		}
	}
	if s.Reveal() != "sk-live-123456" {
		t.Fatalf("Reveal = %q", s.Reveal())
	}
}

func TestScrubber(t *testing.T) {
	sc := secret.NewScrubber(secret.New("alpha-secret"), secret.New("xy"), secret.New("beta-secret"))
	got := sc.String("a alpha-secret b beta-secret c xy")
	want := "a [REDACTED] b [REDACTED] c xy"
	if got != want {
		t.Fatalf("String: want %q, got %q", want, got)
	}
	in := []byte("nothing here")
	if out := sc.Bytes(in); &out[0] != &in[0] {
		t.Fatal("Bytes copied text that holds no secret")
	}
	if got := string(sc.Bytes([]byte("x alpha-secret"))); got != "x [REDACTED]" {
		t.Fatalf("Bytes: got %q", got)
	}
	if !sc.Contains("..beta-secret..") || sc.Contains("clean") {
		t.Fatal("Contains wrong")
	}
	var zero *secret.Scrubber
	if zero.String("alpha-secret") != "alpha-secret" {
		t.Fatal("nil scrubber must pass text through")
	}
}

// The stream writer catches a secret however the writes split it, and a
// buffer behind it that cuts what it keeps can never keep a fragment.
func TestScrubWriterCatchesSplitSecrets(t *testing.T) {
	sec := "sk-live-0123456789abcdef"
	sc := secret.NewScrubber(secret.New(sec), secret.New("other-secret-xyz"))
	text := "head " + sec + " middle other-secret-xyz tail " + sec
	want := strings.NewReplacer(sec, secret.Redacted, "other-secret-xyz", secret.Redacted).Replace(text)
	for chunk := 1; chunk <= len(text); chunk++ {
		var out strings.Builder
		w := sc.Writer(&out)
		for i := 0; i < len(text); i += chunk {
			if _, err := w.Write([]byte(text[i:min(i+chunk, len(text))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("chunks of %d: got %q, want %q", chunk, out.String(), want)
		}
	}
	// Nothing forwarded before Close can hold a partial secret at its end.
	var out strings.Builder
	w := sc.Writer(&out)
	_, _ = w.Write([]byte("x" + sec[:10]))
	if strings.Contains(out.String(), sec[:4]) {
		t.Fatalf("forwarded the start of a secret before seeing the rest: %q", out.String())
	}
	// No secrets: a plain pass-through.
	var plain strings.Builder
	pw := secret.NewScrubber().Writer(&plain)
	_, _ = pw.Write([]byte("abc"))
	if plain.String() != "abc" || pw.Close() != nil {
		t.Fatal("pass-through writer")
	}
}
