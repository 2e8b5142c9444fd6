package creds

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Credential states, from the most to the least blocking.
const (
	StateDisabled  = "disabled"  // out until enabled
	StateCooling   = "cooling"   // rate limited until CoolingUntil
	StateBusy      = "busy"      // at its concurrency limit or out of rate for now
	StateAvailable = "available" // an acquire would get it
)

// Stats is a snapshot of the pool, read in one atomic script.
type Stats struct {
	Pool string    `json:"pool"`
	At   time.Time `json:"at"` // Redis's clock
	// Total credentials; Available: an acquire would get one of these now;
	// Leased: holding at least one lease; Cooling; Disabled.
	Total     int `json:"total"`
	Available int `json:"available"`
	Leased    int `json:"leased"`
	Cooling   int `json:"cooling"`
	Disabled  int `json:"disabled"`
	// InFlight is the number of live leases in the pool.
	InFlight    int               `json:"in_flight"`
	Credentials []CredentialStats `json:"credentials"`
}

// CredentialStats is the state of one credential.
type CredentialStats struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	MaxConcurrent int    `json:"max_concurrent"`
	Rate          string `json:"rate,omitempty"`
	// InFlight is how many leases are held, by Holders.
	InFlight int      `json:"in_flight"`
	Holders  []Holder `json:"holders,omitempty"`
	// CoolingUntil is zero unless cooling; CoolingReason says why.
	CoolingUntil  time.Time `json:"cooling_until,omitzero"`
	CoolingReason string    `json:"cooling_reason,omitempty"`
	// DisabledReason and DisabledAt are set while disabled.
	DisabledReason string    `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time `json:"disabled_at,omitzero"`
	// StartsInWindow counts acquisitions in the current rate window (only
	// with a rate).
	StartsInWindow int       `json:"starts_in_window"`
	LastUsed       time.Time `json:"last_used,omitzero"`
	// Starts counts the leases granted on the credential so far
	// (cumulative; a dashboard charts its rate).
	Starts int64 `json:"starts"`
	// RateLimited counts the releases that reported a rate limit so far
	// (cumulative).
	RateLimited int64 `json:"rate_limited"`
}

// Holder is one live lease.
type Holder struct {
	Owner   string    `json:"owner"`
	Token   uint64    `json:"token"`
	Expires time.Time `json:"expires"`
}

// Stats reads the state of every credential.
func (p *Pool) Stats(ctx context.Context) (Stats, error) {
	reply, err := statsScript.Run(ctx, p.scripts, []string{p.keys.creds}).Result()
	if err != nil {
		return Stats{}, fmt.Errorf("creds: stats of pool %q: %w", p.name, err)
	}
	st, err := decodeStats(reply)
	if err != nil {
		return Stats{}, fmt.Errorf("creds: stats of pool %q: %w", p.name, err)
	}
	st.Pool = p.name
	return st, nil
}

func decodeStats(reply any) (Stats, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < 1 {
		return Stats{}, fmt.Errorf("unexpected reply %T", reply)
	}
	nowUS, err := ratelimit.Int64(arr[0])
	if err != nil {
		return Stats{}, fmt.Errorf("time: %w", err)
	}
	st := Stats{At: time.UnixMicro(nowUS)}
	for i, e := range arr[1:] {
		c, err := decodeCredential(e, nowUS)
		if err != nil {
			return Stats{}, fmt.Errorf("credential %d: %w", i, err)
		}
		st.Total++
		st.InFlight += c.InFlight
		if c.InFlight > 0 {
			st.Leased++
		}
		switch c.State {
		case StateAvailable:
			st.Available++
		case StateCooling:
			st.Cooling++
		case StateDisabled:
			st.Disabled++
		}
		st.Credentials = append(st.Credentials, c)
	}
	sort.Slice(st.Credentials, func(i, j int) bool { return st.Credentials[i].ID < st.Credentials[j].ID })
	return st, nil
}

func decodeCredential(e any, nowUS int64) (CredentialStats, error) {
	f, ok := e.([]any)
	if !ok || len(f) != 12 {
		return CredentialStats{}, fmt.Errorf("unexpected shape %T", e)
	}
	str := func(i int) (string, error) {
		s, ok := f[i].(string)
		if !ok {
			return "", fmt.Errorf("field %d is %T, want a string", i, f[i])
		}
		return s, nil
	}
	num := func(i int) (int64, error) { return ratelimit.Int64(f[i]) }
	var c CredentialStats
	var err error
	var maxC, rateN, rateUS, disabled, disabledAt, coolUntil, starts int64
	var lastUsed float64
	if c.ID, err = str(0); err != nil {
		return c, err
	}
	for _, x := range []struct {
		dst *int64
		i   int
	}{{&maxC, 1}, {&rateN, 2}, {&rateUS, 3}, {&disabled, 4}, {&disabledAt, 6}, {&coolUntil, 7}, {&starts, 10}} {
		if *x.dst, err = num(x.i); err != nil {
			return c, fmt.Errorf("field %d: %w", x.i, err)
		}
	}
	if c.DisabledReason, err = str(5); err != nil {
		return c, err
	}
	if c.CoolingReason, err = str(8); err != nil {
		return c, err
	}
	if lastUsed, err = ratelimit.Float64(f[9]); err != nil {
		return c, fmt.Errorf("last used: %w", err)
	}
	leases, ok := f[11].([]any)
	if !ok || len(leases)%2 != 0 {
		return c, fmt.Errorf("leases: unexpected shape %T", f[11])
	}
	for i := 0; i < len(leases); i += 2 {
		member, ok := leases[i].(string)
		if !ok {
			return c, fmt.Errorf("lease member is %T", leases[i])
		}
		exp, err := ratelimit.Float64(leases[i+1])
		if err != nil {
			return c, fmt.Errorf("lease expiry: %w", err)
		}
		tok, owner, _ := strings.Cut(member, "|")
		t, err := ratelimit.Int64(tok)
		if err != nil {
			return c, fmt.Errorf("lease token: %w", err)
		}
		c.Holders = append(c.Holders, Holder{Owner: owner, Token: uint64(t), Expires: time.UnixMicro(int64(exp))})
	}
	c.MaxConcurrent = int(maxC)
	c.InFlight = len(c.Holders)
	c.StartsInWindow = int(starts)
	if rateN > 0 {
		c.Rate = ratelimit.Limit{N: int(rateN), Period: time.Duration(rateUS) * time.Microsecond}.String()
	}
	if lastUsed > 0 {
		c.LastUsed = time.UnixMicro(int64(lastUsed))
	}
	if coolUntil > 0 {
		c.CoolingUntil = time.UnixMicro(coolUntil)
	}
	if disabled == 1 {
		c.DisabledAt = time.UnixMicro(disabledAt)
	} else {
		c.DisabledReason = ""
	}
	switch {
	case disabled == 1:
		c.State = StateDisabled
	case coolUntil > nowUS:
		c.State = StateCooling
	case c.InFlight >= c.MaxConcurrent || (rateN > 0 && c.StartsInWindow >= int(rateN)):
		c.State = StateBusy
	default:
		c.State = StateAvailable
	}
	return c, nil
}
