// Package secret holds credential secrets so that they cannot be printed by
// accident, and scrubs known secrets out of text that leaves the worker.
package secret

import (
	"bytes"
	"io"
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
	maxLen  int
}

// NewScrubber builds a Scrubber for the given secrets. Secrets shorter than
// 4 bytes are ignored: replacing them would shred ordinary text while
// protecting nothing.
func NewScrubber(secrets ...Secret) *Scrubber {
	var pairs []string
	var raw [][]byte
	longest := 0
	for _, s := range secrets {
		if len(s.v) < 4 {
			continue
		}
		pairs = append(pairs, s.v, Redacted)
		raw = append(raw, []byte(s.v))
		longest = max(longest, len(s.v))
	}
	if len(pairs) == 0 {
		return &Scrubber{}
	}
	return &Scrubber{r: strings.NewReplacer(pairs...), secrets: raw, maxLen: longest}
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

// MaxLen is the length of the longest secret scrubbed (0 for none).
func (sc *Scrubber) MaxLen() int {
	if sc == nil {
		return 0
	}
	return sc.maxLen
}

// Writer returns a writer that passes everything written to it on to w
// with every known secret replaced. It holds back the last MaxLen-1 bytes
// until more arrive or Close, so a secret split across writes is caught
// too. Put it in front of any buffer that cuts what it keeps: whatever the
// buffer cuts is then already scrubbed, and no fragment of a secret can
// survive at the cut.
func (sc *Scrubber) Writer(w io.Writer) *Writer {
	return &Writer{sc: sc, w: w, hold: max(sc.MaxLen()-1, 0)}
}

// Writer scrubs a stream; see Scrubber.Writer. Not safe for concurrent use.
type Writer struct {
	sc      *Scrubber
	w       io.Writer
	hold    int
	pending []byte
	err     error
}

// Write scrubs and forwards all but the bytes that may begin a secret.
func (x *Writer) Write(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	if x.hold == 0 {
		_, x.err = x.w.Write(p)
		return len(p), x.err
	}
	x.pending = append(x.pending, p...)
	x.pending = x.sc.Bytes(x.pending)
	if n := len(x.pending) - x.hold; n > 0 {
		if _, x.err = x.w.Write(x.pending[:n]); x.err != nil {
			return 0, x.err
		}
		x.pending = append(x.pending[:0], x.pending[n:]...)
	}
	return len(p), nil
}

// Close forwards what was held back (scrubbed). It does not close w.
func (x *Writer) Close() error {
	if x.err != nil || len(x.pending) == 0 {
		return x.err
	}
	_, x.err = x.w.Write(x.sc.Bytes(x.pending))
	x.pending = nil
	return x.err
}
