// Package secret holds credential secrets so that they cannot be printed by
// accident, and scrubs known secrets out of text that leaves the worker.
package secret

import "io"

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

// Scrubber replaces every known secret in text with Redacted, in each
// form a job may print it (see formsOf): raw, URL-encoded, JSON-escaped,
// and base64 at any alignment ("Authorization: Basic " + base64("user:" +
// secret)), where the whole base64 run around the secret is replaced. Text
// is scanned once by an automaton over all forms of all secrets, so the
// cost is linear in the text whatever the number of secrets. The zero
// value scrubs nothing. It is safe for concurrent use once built.
type Scrubber struct {
	m *matcher
}

// NewScrubber builds a Scrubber for the given secrets. Secrets shorter than
// 4 bytes are ignored: replacing them would shred ordinary text while
// protecting nothing.
func NewScrubber(secrets ...Secret) *Scrubber {
	var forms []form
	for _, s := range secrets {
		if len(s.v) >= 4 {
			forms = append(forms, formsOf(s.v)...)
		}
	}
	if len(forms) == 0 {
		return &Scrubber{}
	}
	return &Scrubber{m: newMatcher(forms)}
}

// String returns s with every known secret replaced.
func (sc *Scrubber) String(s string) string {
	if sc == nil || sc.m == nil {
		return s
	}
	spans, _ := scan(sc.m, s, false)
	if len(spans) == 0 {
		return s
	}
	return string(redact(s, spans))
}

// Bytes returns b with every known secret replaced. It returns b itself when
// no secret occurs in it.
func (sc *Scrubber) Bytes(b []byte) []byte {
	out, _ := sc.scrub(b)
	return out
}

// scrub is Bytes that also says whether the last redaction was widened
// into a base64 run that reaches the end of b (see scan).
func (sc *Scrubber) scrub(b []byte) ([]byte, runState) {
	if sc == nil || sc.m == nil {
		return b, outsideRun
	}
	spans, open := scan(sc.m, b, false)
	if len(spans) == 0 {
		return b, outsideRun
	}
	return redact(b, spans), open
}

// Contains reports whether any known secret occurs in s, in any form.
func (sc *Scrubber) Contains(s string) bool {
	if sc == nil || sc.m == nil {
		return false
	}
	spans, _ := scan(sc.m, s, true)
	return len(spans) > 0
}

// MaxLen is the length of the longest form of a secret scrubbed (0 for
// none).
func (sc *Scrubber) MaxLen() int {
	if sc == nil || sc.m == nil {
		return 0
	}
	return sc.m.maxLen
}

// span is a part of a text to redact: [from, to).
type span struct{ from, to int }

// runState tells where a text ends relative to a base64 run that a
// redaction was widened into.
type runState uint8

const (
	outsideRun runState = iota
	inRun               // in the run's characters: more may follow, then '=' padding
	inPadding           // in its '=' padding
)

// scan returns the parts of text to redact, in order, merged where they
// overlap: each occurrence of a form, a base64 core widened to the whole
// run of base64 characters around it and its '=' padding. It also tells
// whether text ends inside such a widened run. With first, it returns at
// the first occurrence. Each byte is stepped once and each base64 run
// around a match is measured once, so the cost is linear in len(text).
func scan[T string | []byte](m *matcher, text T, first bool) ([]span, runState) {
	var spans []span
	var s int32
	// The base64 run last widened to: [runFrom, runTo), its characters
	// ending at runChars.
	runFrom, runChars, runTo := 0, 0, 0
	for i := 0; i < len(text); i++ {
		s = m.step(s, text[i])
		st := &m.states[s]
		l := int(st.longest)
		if l == 0 {
			continue
		}
		from, to := i+1-l, i+1
		if first {
			return []span{{from, to}}, outsideRun
		}
		if b := int(st.b64); b > 0 {
			// The core is base64 characters only: it lies inside one run.
			if core := i + 1 - b; core < runFrom || core >= runChars {
				runFrom = core
				for runFrom > 0 && isBase64(text[runFrom-1]) {
					runFrom--
				}
				runChars = i + 1
				for runChars < len(text) && isBase64(text[runChars]) {
					runChars++
				}
				runTo = runChars
				for runTo < len(text) && text[runTo] == '=' {
					runTo++
				}
			}
			from, to = min(from, runFrom), max(to, runTo)
		}
		for len(spans) > 0 && spans[len(spans)-1].to > from {
			top := spans[len(spans)-1]
			spans = spans[:len(spans)-1]
			from, to = min(from, top.from), max(to, top.to)
		}
		spans = append(spans, span{from, to})
	}
	switch {
	case runChars == 0 || runTo < len(text):
		return spans, outsideRun
	case runTo > runChars:
		return spans, inPadding
	default:
		return spans, inRun
	}
}

// redact returns text with each span replaced by Redacted.
func redact[T string | []byte](text T, spans []span) []byte {
	n := len(text)
	for _, sp := range spans {
		n += len(Redacted) - (sp.to - sp.from)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, sp := range spans {
		out = append(out, text[at:sp.from]...)
		out = append(out, Redacted...)
		at = sp.to
	}
	return append(out, text[at:]...)
}

// Writer returns a writer that passes everything written to it on to w
// with every known secret replaced. It holds back the last MaxLen bytes
// until more arrive or Close, so a secret split across writes is caught
// too, with the character before it (in base64 that character holds bits
// of the secret's first byte); and when a redaction reached into a base64
// run at the end of what it held, the rest of that run is dropped as it
// arrives. Put it in front of any buffer that cuts what it keeps: whatever
// the buffer cuts is then already scrubbed, and no fragment of a secret
// can survive at the cut. The part of a long base64 run that was passed on
// before the secret's own characters arrived stays (in "Basic " +
// base64("user:" + secret), the encoded user name), where String would
// replace the whole run.
func (sc *Scrubber) Writer(w io.Writer) *Writer {
	return &Writer{sc: sc, w: w, hold: sc.MaxLen()}
}

// Writer scrubs a stream; see Scrubber.Writer. Not safe for concurrent use.
type Writer struct {
	sc      *Scrubber
	w       io.Writer
	hold    int
	pending []byte
	run     runState // pending ends in a redacted base64 run
	err     error
}

// Write scrubs and forwards all but the bytes that may begin a secret.
func (x *Writer) Write(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	n := len(p)
	if x.hold == 0 {
		_, x.err = x.w.Write(p)
		return n, x.err
	}
	if p = x.skipRun(p); len(p) == 0 {
		return n, nil
	}
	x.pending = append(x.pending, p...)
	x.pending, x.run = x.sc.scrub(x.pending)
	if cut := len(x.pending) - x.hold; cut > 0 {
		if _, x.err = x.w.Write(x.pending[:cut]); x.err != nil {
			return 0, x.err
		}
		x.pending = append(x.pending[:0], x.pending[cut:]...)
	}
	return n, nil
}

// skipRun drops from p the rest of a base64 run whose start was redacted.
func (x *Writer) skipRun(p []byte) []byte {
	i := 0
	if x.run == inRun {
		for i < len(p) && isBase64(p[i]) {
			i++
		}
		if i < len(p) && p[i] == '=' {
			x.run = inPadding
		}
	}
	if x.run == inPadding {
		for i < len(p) && p[i] == '=' {
			i++
		}
	}
	if i < len(p) {
		x.run = outsideRun
	}
	return p[i:]
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
