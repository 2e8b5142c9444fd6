package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit is "at most N events in any window of length Period".
type Limit struct {
	N      int
	Period time.Duration
}

// IsZero reports whether the limit is unset (no limit).
func (l Limit) IsZero() bool { return l.N == 0 && l.Period == 0 }

// String renders the limit in the form ParseLimit reads: "60/m", "5/30s".
func (l Limit) String() string {
	if l.IsZero() {
		return ""
	}
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h", 24 * time.Hour: "d"}
	if u, ok := unit[l.Period]; ok {
		return fmt.Sprintf("%d/%s", l.N, u)
	}
	return fmt.Sprintf("%d/%s", l.N, l.Period)
}

// Validate reports whether the limit can be enforced.
func (l Limit) Validate() error {
	if l.N < 1 {
		return fmt.Errorf("ratelimit: count must be at least 1, got %d", l.N)
	}
	if l.Period < time.Millisecond {
		return fmt.Errorf("ratelimit: period must be at least 1ms, got %s", l.Period)
	}
	return nil
}

// ErrBadRate is wrapped by every error ParseLimit returns.
var ErrBadRate = errors.New("ratelimit: bad rate")

// ParseLimit reads a rate written as N/PERIOD, where PERIOD is a unit
// (s, m, h or d, meaning one of it) or a Go duration ("30s", "1m30s",
// "500ms"). Examples: "60/m", "10/s", "1000/h", "5/30s".
func ParseLimit(s string) (Limit, error) {
	orig := s
	s = strings.TrimSpace(s)
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrBadRate, orig, fmt.Sprintf(format, args...))
	}
	count, period, ok := strings.Cut(s, "/")
	if !ok {
		return bad("want N/PERIOD, for example 60/m or 5/30s")
	}
	count, period = strings.TrimSpace(count), strings.TrimSpace(period)
	n, err := strconv.Atoi(count)
	if errors.Is(err, strconv.ErrRange) {
		return bad("count %s is out of range", count)
	}
	if err != nil {
		return bad("count %q is not a whole number", count)
	}
	if n < 1 {
		return bad("count must be at least 1, got %d", n)
	}
	var d time.Duration
	switch period {
	case "s", "sec", "second":
		d = time.Second
	case "m", "min", "minute":
		d = time.Minute
	case "h", "hour":
		d = time.Hour
	case "d", "day":
		d = 24 * time.Hour
	case "":
		return bad("period is missing after the slash")
	default:
		d, err = time.ParseDuration(period)
		if err != nil {
			return bad("period %q is neither a unit (s, m, h, d) nor a duration like 30s", period)
		}
	}
	if d < time.Millisecond {
		return bad("period must be at least 1ms, got %s", d)
	}
	return Limit{N: n, Period: d}, nil
}
