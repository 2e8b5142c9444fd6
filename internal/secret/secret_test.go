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
