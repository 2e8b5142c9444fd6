package jobs

import (
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	b := tailBuffer{max: 8}
	for _, s := range []string{"ab", "cdef", "ghijkl"} {
		b.Write([]byte(s))
	}
	if got := b.String(); got != "…efghijkl" {
		t.Errorf("tail %q", got)
	}
	b = tailBuffer{max: 4}
	b.Write([]byte("xyz"))
	if got := b.String(); got != "xyz" {
		t.Errorf("short tail %q", got)
	}
	b = tailBuffer{max: 4}
	b.Write([]byte("aé€")) // 1+2+3 bytes: the tail starts inside "é"
	if got := b.String(); got != "…€" {
		t.Errorf("tail cut inside a rune: %q", got)
	}
}

func TestHeadBuffer(t *testing.T) {
	b := headBuffer{max: 5}
	for _, s := range []string{"abc", "", "de", "f", "ghi"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if out := b.output(); string(out.Body) != "abcde" || !out.Truncated {
		t.Errorf("got %q, %v", out.Body, out.Truncated)
	}
}

func TestHeadString(t *testing.T) {
	if got := headString([]byte("  héllo  "), 100); got != "héllo" {
		t.Errorf("%q", got)
	}
	if got := headString([]byte("héllo"), 2); got != "h…" {
		t.Errorf("cut inside a rune: %q", got)
	}
	if got := headString([]byte("a\xffb"), 10); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: %q", got)
	}
}

func TestStderrCollector(t *testing.T) {
	c := newStderrCollector()
	// Written in odd pieces, across line ends.
	in := "warming up\nRetry-After: 1\nre" + "try-after:  9 \nlast words\n\n" + strings.Repeat("z", 3000) + "\nRetry-After: 12"
	for i := 0; i < len(in); i += 7 {
		c.Write([]byte(in[i:min(i+7, len(in))]))
	}
	c.finish()
	if !c.hasRetry || c.retry != "12" {
		t.Errorf("retry %q %v, want 12", c.retry, c.hasRetry)
	}
	if len(c.lastLine) > reasonMax+len("…") || !strings.HasPrefix(c.lastLine, "zzz") {
		t.Errorf("last line (%d bytes) %.20q", len(c.lastLine), c.lastLine)
	}
	if s := c.tail.String(); len(s) > stderrTailMax+len("…") || !strings.HasSuffix(s, "Retry-After: 12") {
		t.Errorf("tail (%d bytes) ends %q", len(s), s[max(0, len(s)-20):])
	}
}
