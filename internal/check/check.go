// Package check is the shared vocabulary of settings checks: the package
// that owns a setting (jobs for a job kind's section, queue for stream
// names) reports what is wrong with it as Problems keyed relative to its
// own section, and the caller (config) places them: it prefixes the key
// path and adds the file and line.
//
// It is a leaf package so that owners and config import it without a
// cycle.
package check

import (
	"fmt"
	"strings"
	"time"
)

// Problem is one thing wrong with a setting.
type Problem struct {
	// Key is the key path relative to the section checked, such as
	// "timeout" or "env.FOO"; "" for the section itself.
	Key string
	// Msg says what is wrong; it never quotes a secret.
	Msg string
}

// List collects problems in the order they are found.
type List []Problem

// Add appends a problem at key.
func (l *List) Add(key, format string, args ...any) {
	*l = append(*l, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Err adds err's text as a problem at key when err is not nil.
func (l *List) Err(key string, err error) {
	if err != nil {
		l.Add(key, "%v", err)
	}
}

// AtLeast reports a duration under least.
func (l *List) AtLeast(key string, d, least time.Duration) {
	if d < least {
		l.Add(key, "must be at least %s, got %s", least, d)
	}
}

// AtLeastInt reports a number under least.
func (l *List) AtLeastInt(key string, n, least int) {
	if n < least {
		l.Add(key, "must be at least %d, got %d", least, n)
	}
}

// NotNegative reports a negative duration.
func (l *List) NotNegative(key string, d time.Duration) {
	if d < 0 {
		l.Add(key, "must not be negative, got %s", d)
	}
}

// Positive reports a duration that is not more than 0.
func (l *List) Positive(key string, d time.Duration) {
	if d <= 0 {
		l.Add(key, "must be more than 0, got %s", d)
	}
}

// AsError is the first problem as an error, "<prefix>: <key>: <msg>"
// (without the key when it is ""), or nil: for constructors that stop at
// the first problem.
func (l List) AsError(prefix string) error {
	if len(l) == 0 {
		return nil
	}
	if p := l[0]; p.Key != "" {
		return fmt.Errorf("%s: %s: %s", prefix, p.Key, p.Msg)
	}
	return fmt.Errorf("%s: %s", prefix, l[0].Msg)
}

// Join appends key to the key path section: Join("jobs", "exec") is
// "jobs.exec", Join("pool.credentials", "[0]") is "pool.credentials[0]".
func Join(section, key string) string {
	switch {
	case section == "":
		return key
	case key == "":
		return section
	case strings.HasPrefix(key, "["):
		return section + key
	}
	return section + "." + key
}

// Quote renders a value from the configuration for a message: quoted, and
// cut short when long, so that one bad value cannot flood the terminal.
func Quote(s string) string {
	const limit = 60
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit]) + "…"
	}
	return fmt.Sprintf("%q", s)
}
