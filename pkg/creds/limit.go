package creds

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// LimitKind is what a limit counts and how.
type LimitKind string

// The kinds of limit a credential can have. A start needs room in every
// limit of its credential and is charged to all of them at once.
const (
	// LimitWindow: at most N starts in any window of length Period (an
	// exact sliding-window log). Written rate=N/P.
	LimitWindow LimitKind = "rate"
	// LimitSmooth: at most Burst starts back to back, then one every
	// Period/N (GCRA), as a leaky-bucket gateway such as nginx limit_req
	// enforces it. Written rate=N/P,burst=B.
	LimitSmooth LimitKind = "smooth"
	// LimitCost: at most N cost units (tokens, credits, rows) in any
	// window of length Period (an exact sliding log with a running sum).
	// Written cost=N/P.
	LimitCost LimitKind = "cost"
)

// Limit is one limit of a credential. Parse one with ParseLimit; the zero
// value is not a valid limit.
//
// Adding a kind of limit touches these places, and no others:
//  1. a LimitKind constant here, its rule in Validate, its text in
//     ParseLimit and String, its letter in encode and decodeLimits;
//  2. its Lua in lua/lib.lua: parse_limits reads the letter, lim_keys,
//     lim_when, lim_take and lim_use give its keys, answer, charge and use
//     (a new algorithm goes in pkg/ratelimit as a *_lib.lua);
//  3. its YAML: internal/config decodes {rate|cost, burst, scope} straight
//     into this type (decodeLimit) and config/reference.yaml shows it;
//  4. a row in limits_test.go's table and, for a new algorithm, a
//     precision figure in bench/limits.go.
type Limit struct {
	Kind   LimitKind
	N      int64
	Period time.Duration
	// Burst is the number of back-to-back starts of a LimitSmooth; 0 for
	// the other kinds.
	Burst int
	// Scope, when set, makes the limit count and bind only starts whose
	// Request.Scope is the same (an API's limit per model); empty: every
	// start on the credential. See ValidScope.
	Scope string
}

// ErrBadLimit is wrapped by every error ParseLimit and Limit.Validate
// return.
var ErrBadLimit = errors.New("creds: bad limit")

// RateLimit returns the exact-window limit "at most n starts in any window
// of period", the meaning of a credential's `rate: n/period`.
func RateLimit(l ratelimit.Limit) Limit {
	return Limit{Kind: LimitWindow, N: int64(l.N), Period: l.Period}
}

// ParseLimit reads a limit written as the CLI's --limit and the status
// show it: "rate=500/m" (exact window of starts), "rate=10/s,burst=1"
// (smooth), "cost=30000/m" (cost units in an exact window). Rates are
// N/PERIOD as ratelimit.ParseLimit reads them (60/m, 5/30s).
func ParseLimit(spec string) (Limit, error) {
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrBadLimit, spec, fmt.Sprintf(format, args...))
	}
	var l Limit
	var rate, cost, burst string
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return bad("want rate=N/PERIOD[,burst=B] or cost=N/PERIOD, for example rate=500/m, rate=10/s,burst=1, cost=30000/m")
		}
		if seen[k] {
			return bad("%s is given twice", k)
		}
		seen[k] = true
		switch k {
		case "rate":
			rate = v
		case "cost":
			cost = v
		case "burst":
			burst = v
		case "scope":
			if err := ValidScope(v); err != nil {
				return bad("scope %v", err)
			}
			l.Scope = v
		default:
			return bad("unknown part %q (want rate, cost, burst or scope)", k)
		}
	}
	switch {
	case rate != "" && cost != "":
		return bad("a limit is either a rate or a cost, not both: give two limits")
	case rate == "" && cost == "":
		return bad("give rate=N/PERIOD or cost=N/PERIOD")
	case cost != "" && burst != "":
		return bad("burst applies to rate limits only")
	}
	text, kind := rate, LimitWindow
	if cost != "" {
		text, kind = cost, LimitCost
	}
	r, err := ratelimit.ParseLimit(text)
	if err != nil {
		return bad("%v", strings.TrimPrefix(err.Error(), ratelimit.ErrBadRate.Error()+" "))
	}
	l = Limit{Kind: kind, N: int64(r.N), Period: r.Period, Scope: l.Scope}
	if burst != "" {
		b, err := strconv.Atoi(burst)
		if err != nil || b < 1 {
			return bad("burst %q must be a whole number of at least 1", burst)
		}
		l.Kind, l.Burst = LimitSmooth, b
	}
	return l, l.Validate()
}

// Validate reports whether the limit can be enforced.
func (l Limit) Validate() error {
	switch {
	case l.Kind != LimitWindow && l.Kind != LimitSmooth && l.Kind != LimitCost:
		return fmt.Errorf("%w: unknown kind %q", ErrBadLimit, l.Kind)
	case l.N < 1:
		return fmt.Errorf("%w: count must be at least 1, got %d", ErrBadLimit, l.N)
	case l.Period < time.Millisecond:
		return fmt.Errorf("%w: period must be at least 1ms, got %s", ErrBadLimit, l.Period)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: period %s is not a whole number of microseconds", ErrBadLimit, l.Period)
	case l.Kind == LimitSmooth && l.Burst < 1:
		return fmt.Errorf("%w: burst must be at least 1, got %d", ErrBadLimit, l.Burst)
	case l.Kind != LimitSmooth && l.Burst != 0:
		return fmt.Errorf("%w: burst applies to smooth rate limits only", ErrBadLimit)
	}
	if l.Scope != "" {
		if err := ValidScope(l.Scope); err != nil {
			return fmt.Errorf("%w: scope %w", ErrBadLimit, err)
		}
	}
	return nil
}

// MaxScopeLength bounds a scope.
const MaxScopeLength = 128

// ValidScope reports whether s can be a scope (a limit's, a request's):
// 1 to MaxScopeLength printable ASCII characters other than space and
// the separators ',', ';', '=', '|' (a model name such as "gpt-4o",
// "models/gemini-1.5-pro" or "claude-3-5-sonnet@20240620" is one).
func ValidScope(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxScopeLength:
		return fmt.Errorf("is %d bytes long, at most %d", len(s), MaxScopeLength)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(",;=|", c) >= 0 {
			return fmt.Errorf("%q holds %q: use printable characters other than space , ; = |", s, s[i:i+1])
		}
	}
	return nil
}

// String writes the limit as ParseLimit reads it.
func (l Limit) String() string {
	r := ratelimit.Limit{N: int(l.N), Period: l.Period}.String()
	var s string
	switch l.Kind {
	case LimitCost:
		s = "cost=" + r
	case LimitSmooth:
		s = fmt.Sprintf("rate=%s,burst=%d", r, l.Burst)
	default:
		s = "rate=" + r
	}
	if l.Scope != "" {
		s += ",scope=" + l.Scope
	}
	return s
}

// encode writes the limit for the pool's scripts (see lua/lib.lua): a
// letter, the numbers, and "=<scope>" for a scoped limit.
func (l Limit) encode() string {
	p := l.Period.Microseconds()
	var s string
	switch l.Kind {
	case LimitCost:
		s = fmt.Sprintf("c%d/%d", l.N, p)
	case LimitSmooth:
		s = fmt.Sprintf("g%d/%d/%d", l.N, p, l.Burst)
	default:
		s = fmt.Sprintf("w%d/%d", l.N, p)
	}
	if l.Scope != "" {
		s += "=" + l.Scope
	}
	return s
}

func encodeLimits(ls []Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.encode()
	}
	return strings.Join(parts, ";")
}

// decodeLimits reads what encodeLimits wrote; unknown parts are skipped.
func decodeLimits(s string) []Limit {
	var out []Limit
	for _, part := range strings.Split(s, ";") {
		part, scope, _ := strings.Cut(part, "=")
		if len(part) < 2 {
			continue
		}
		nums := strings.Split(part[1:], "/")
		vals := make([]int64, len(nums))
		ok := len(nums) >= 2
		for i, n := range nums {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				ok = false
			}
			vals[i] = v
		}
		if !ok {
			continue
		}
		l := Limit{N: vals[0], Period: time.Duration(vals[1]) * time.Microsecond, Scope: scope}
		switch part[0] {
		case 'w':
			l.Kind = LimitWindow
		case 'c':
			l.Kind = LimitCost
		case 'g':
			if len(vals) < 3 {
				continue
			}
			l.Kind, l.Burst = LimitSmooth, int(vals[2])
		default:
			continue
		}
		out = append(out, l)
	}
	return out
}
