// Package secret holds credential secrets so that they cannot be printed by
// accident, and scrubs known secrets out of text that leaves the worker.
package secret

import (
	"bytes"
	"strings"
)

// Redacted is what a Secret prints as, and what Scrub puts in place of a
// secret found in text.
const Redacted = "[REDACTED]"

// Secret is a credential secret. Every way of formatting it (fmt verbs, JSON,
// zap's reflection) yields Redacted; Reveal is the only way to the value.
type Secret struct{ v string }

// New wraps a secret value.
func New(v string) Secret { return Secret{v: v} }

// Reveal returns the secret value. Call it only where the value is handed to
// the job (an environment variable, a request header).
func (s Secret) Reveal() string { return s.v }

// Empty reports whether the secret has no value.
func (s Secret) Empty() bool { return s.v == "" }

// String implements fmt.Stringer.
func (s Secret) String() string { return Redacted }

// GoString implements fmt.GoStringer (%#v).
func (s Secret) GoString() string { return Redacted }

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler (YAML, zap).
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// Scrubber replaces every known secret in text with Redacted. The zero value
// scrubs nothing. It is safe for concurrent use once built.
type Scrubber struct {
	r       *strings.Replacer
	secrets [][]byte
}

// NewScrubber builds a Scrubber for the given secrets. Secrets shorter than
// 4 bytes are ignored: replacing them would shred ordinary text while
// protecting nothing.
func NewScrubber(secrets ...Secret) *Scrubber {
	var pairs []string
	var raw [][]byte
	for _, s := range secrets {
		if len(s.v) < 4 {
			continue
		}
		pairs = append(pairs, s.v, Redacted)
		raw = append(raw, []byte(s.v))
	}
	if len(pairs) == 0 {
		return &Scrubber{}
	}
	return &Scrubber{r: strings.NewReplacer(pairs...), secrets: raw}
}

// String returns s with every known secret replaced.
func (sc *Scrubber) String(s string) string {
	if sc == nil || sc.r == nil {
		return s
	}
	return sc.r.Replace(s)
}

// Bytes returns b with every known secret replaced. It returns b itself when
// no secret occurs in it.
func (sc *Scrubber) Bytes(b []byte) []byte {
	if sc == nil || sc.r == nil {
		return b
	}
	for _, s := range sc.secrets {
		if bytes.Contains(b, s) {
			return []byte(sc.r.Replace(string(b)))
		}
	}
	return b
}

// Contains reports whether any known secret occurs in s.
func (sc *Scrubber) Contains(s string) bool {
	if sc == nil {
		return false
	}
	for _, sec := range sc.secrets {
		if strings.Contains(s, string(sec)) {
			return true
		}
	}
	return false
}
