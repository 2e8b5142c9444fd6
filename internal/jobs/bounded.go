package jobs

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// scrubberFor is the scrubber of a run: the configured one, else one for
// the run's own secret.
func scrubberFor(sc *secret.Scrubber, cred Credential) *secret.Scrubber {
	if sc != nil {
		return sc
	}
	return secret.NewScrubber(cred.Secret)
}

// copyScrubbed copies a job's stream into a bounded buffer with secrets
// removed first, so the buffer's cut cannot leave a fragment of one.
func copyScrubbed(dst io.Writer, src io.Reader, sc *secret.Scrubber) {
	w := sc.Writer(dst)
	_, _ = io.Copy(w, src)
	_ = w.Close()
}

// headBuffer keeps the first max bytes written to it and discards the rest,
// so a writer is never blocked and memory stays bounded.
type headBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room < len(p) {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.truncated = true
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *headBuffer) output() Output { return Output{Body: b.buf, Truncated: b.truncated} }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
	cut bool // bytes were dropped from the front
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if n >= b.max {
		b.cut = b.cut || n > b.max || len(b.buf) > 0
		b.buf = append(b.buf[:0], p[n-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + n - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns the kept bytes as valid UTF-8, trimmed, with "…" in front
// when the start was dropped.
func (b *tailBuffer) String() string {
	buf := b.buf
	if b.cut {
		// Skip a partial rune at the front.
		for i := 0; i < utf8.UTFMax-1 && len(buf) > 0 && !utf8.RuneStart(buf[0]); i++ {
			buf = buf[1:]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(buf), "\uFFFD"))
	if b.cut && s != "" {
		return "…" + s
	}
	return s
}

// headString returns at most n bytes of b as valid, trimmed UTF-8, cut at
// a rune boundary and ending in "…" when shortened.
func headString(b []byte, n int) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut]) + "…"
}

// Bounds on what exec keeps of stderr.
const (
	stderrTailMax = 2 << 10 // the tail quoted in error texts
	stderrLineMax = 1 << 10 // bytes of one line examined
	reasonMax     = 200     // the exit-77 reason
)

// stderrCollector reads a job's stderr: it keeps a bounded tail for error
// texts, the last "Retry-After:" and "Cost:" lines' values and the last
// other non-empty line. Lines longer than stderrLineMax are examined by their start only.
type stderrCollector struct {
	tail     tailBuffer
	line     []byte
	lastLine string // last non-empty line that is not a Retry-After or Cost line
	retry    string // value of the last Retry-After line
	hasRetry bool
	cost     string // value of the last Cost line
	hasCost  bool
}

func newStderrCollector() *stderrCollector {
	return &stderrCollector{tail: tailBuffer{max: stderrTailMax}}
}

func (c *stderrCollector) Write(p []byte) (int, error) {
	n := len(p)
	c.tail.Write(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := stderrLineMax - len(c.line); room > 0 {
			c.line = append(c.line, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		c.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// finish examines a last line that had no newline.
func (c *stderrCollector) finish() {
	if len(c.line) > 0 {
		c.endLine()
	}
}

func (c *stderrCollector) endLine() {
	s := strings.TrimSpace(strings.ToValidUTF8(string(c.line), "\uFFFD"))
	c.line = c.line[:0]
	if s == "" {
		return
	}
	if name, value, ok := strings.Cut(s, ":"); ok {
		switch name = strings.TrimSpace(name); {
		case strings.EqualFold(name, "Retry-After"):
			c.retry, c.hasRetry = strings.TrimSpace(value), true
			return
		case strings.EqualFold(name, "Cost"):
			c.cost, c.hasCost = strings.TrimSpace(value), true
			return
		}
	}
	c.lastLine = headString([]byte(s), reasonMax)
}
