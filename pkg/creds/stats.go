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
	StateCooling   = "cooling"   // resting (rate limited) until CoolingUntil
	StateBusy      = "busy"      // at its concurrency limit, its limits or its pace for now
	StateAvailable = "available" // an acquire would get it
)

// Stats is a snapshot of the pool, read in one atomic script.
type Stats struct {
	Pool string    `json:"pool"`
	At   time.Time `json:"at"` // Redis's clock
	Counts
	Credentials []CredentialStats `json:"credentials"`
	// Accounts are the pool's accounts (see Account), by ID.
	Accounts []AccountStats `json:"accounts"`
}

// AccountStats is the state of one account: its limits and their use,
// its keys, its runs in flight and any rest or pace its keys' replies
// put on it.
type AccountStats struct {
	ID string `json:"id"`
	// Account is the enclosing account ("" none).
	Account string `json:"account,omitempty"`
	// State: StateCooling while it rests, StateBusy while it (or an
	// enclosing account) has no room for a start of cost 1, else
	// StateAvailable.
	State string `json:"state"`
	// Keys are the credentials that name it as their account.
	Keys []string `json:"keys"`
	// Limits are its limits, with their use now.
	Limits []LimitStats `json:"limits"`
	// InFlight counts the live leases of its keys.
	InFlight int `json:"in_flight"`
	// CoolingUntil, CoolingReason and RestCause: its rest, while it lasts
	// (what a reply to one of its keys said: every key of it rests).
	CoolingUntil  time.Time   `json:"cooling_until,omitzero"`
	CoolingReason string      `json:"cooling_reason,omitempty"`
	RestCause     string      `json:"rest_cause,omitempty"`
	ScopeRests    []ScopeRest `json:"scope_rests,omitempty"`
	// Pace is the spacing between its starts learnt from bare 429s.
	Pace time.Duration `json:"pace,omitempty"`
	// NextStart is when it can take a start of cost 1 (zero: now).
	NextStart time.Time `json:"next_start,omitzero"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	// Starts and RateLimited count its keys' starts and rate-limited runs
	// since it was registered.
	Starts      int64 `json:"starts"`
	RateLimited int64 `json:"rate_limited"`
}

// Counts are the pool's figures: its credentials by state, its leases and
// its waiters (their keys are inline in Stats' JSON).
type Counts struct {
	// Total credentials; Available: an acquire would get one of these now;
	// Leased: holding at least one lease; Cooling; Disabled.
	Total     int `json:"total"`
	Available int `json:"available"`
	Leased    int `json:"leased"`
	Cooling   int `json:"cooling"`
	Disabled  int `json:"disabled"`
	// InFlight is the number of live leases in the pool.
	InFlight int `json:"in_flight"`
	// Waiting is the number of acquires queued fleet-wide.
	Waiting int `json:"waiting"`
}

// CredentialStats is the state of one credential.
type CredentialStats struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	MaxConcurrent int    `json:"max_concurrent"`
	// Groups are the key groups it is in (Credential.Groups).
	Groups []string `json:"groups,omitempty"`
	// Account is the account it belongs to ("" none).
	Account string `json:"account,omitempty"`
	// Rate is the first unscoped exact-window rate limit ("" when none), N/period.
	Rate string `json:"rate,omitempty"`
	// Limits are every limit, with its use now.
	Limits []LimitStats `json:"limits"`
	// InFlight is how many leases are held, by Holders.
	InFlight int      `json:"in_flight"`
	Holders  []Holder `json:"holders,omitempty"`
	// CoolingUntil is zero unless resting; CoolingReason says why and
	// RestCause which signal told (a header, a bare 429, ...).
	CoolingUntil time.Time `json:"cooling_until,omitzero"`
	// ScopeRests are rests of one scope only (what a reply to a run of
	// that scope said), while they last.
	ScopeRests    []ScopeRest `json:"scope_rests,omitempty"`
	CoolingReason string      `json:"cooling_reason,omitempty"`
	RestCause     string      `json:"rest_cause,omitempty"`
	// Pace is the spacing between starts learnt from bare 429s (0: none).
	Pace time.Duration `json:"pace,omitempty"`
	// NextStart is when it can take a start of cost 1: zero when now (or
	// disabled).
	NextStart time.Time `json:"next_start,omitzero"`
	// DisabledReason and DisabledAt are set while disabled.
	DisabledReason string    `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time `json:"disabled_at,omitzero"`
	// DisabledBy, while disabled, says who disabled it: DisabledByAPI (a
	// probe may enable it again) or DisabledByOperator (also for a
	// credential disabled before the pool recorded who).
	DisabledBy string `json:"disabled_by,omitempty"`
	// EnabledBy, EnabledReason and EnabledAt say who enabled it last
	// (EnabledByProbe with the probe's cause, or EnabledByOperator), while
	// it is not disabled; empty when never.
	EnabledBy     string    `json:"enabled_by,omitempty"`
	EnabledReason string    `json:"enabled_reason,omitempty"`
	EnabledAt     time.Time `json:"enabled_at,omitzero"`
	// Refusals are the items the API refused on it in a row, "<batch>/<item>:
	// <reason>", oldest first: the evidence that may disable it.
	Refusals []string `json:"refusals,omitempty"`
	// StartsInWindow counts starts in the window of Rate (0 without one).
	StartsInWindow int       `json:"starts_in_window"`
	LastUsed       time.Time `json:"last_used,omitzero"`
	// Starts and RateLimited count leases granted and rate-limited runs
	// since the credential was registered.
	Starts      int64 `json:"starts"`
	RateLimited int64 `json:"rate_limited"`
}

// ScopeRest is a credential's rest for the starts of one scope.
type ScopeRest struct {
	Scope  string    `json:"scope"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// LimitStats is one limit of a credential and its use now.
type LimitStats struct {
	// Limit as ParseLimit reads it: "rate=10/s,burst=1".
	Limit string    `json:"limit"`
	Kind  LimitKind `json:"kind"`
	// Scope is the limit's scope: it binds only starts of that scope
	// (empty: every start).
	Scope string `json:"scope,omitempty"`
	// Used of Of: starts (or cost units) in the window; for a smooth rate,
	// the burst's cells in use.
	Used int64 `json:"used"`
	Of   int64 `json:"of"`
	// NextRoom is when it takes a start of cost 1 (zero: now).
	NextRoom time.Time `json:"next_room,omitzero"`
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
	if !ok || len(arr) < 2 {
		return Stats{}, fmt.Errorf("unexpected reply %T", reply)
	}
	nowUS, err := ratelimit.Int64(arr[0])
	if err != nil {
		return Stats{}, fmt.Errorf("time: %w", err)
	}
	waiting, err := ratelimit.Int64(arr[1])
	if err != nil {
		return Stats{}, fmt.Errorf("waiting: %w", err)
	}
	st := Stats{At: time.UnixMicro(nowUS), Counts: Counts{Waiting: int(waiting)}, Credentials: []CredentialStats{},
		Accounts: []AccountStats{}}
	for i, e := range arr[2:] {
		c, err := decodeCredential(e, nowUS)
		if err != nil {
			return Stats{}, fmt.Errorf("credential %d: %w", i, err)
		}
		if id, ok := strings.CutPrefix(c.ID, "*"); ok {
			st.Accounts = append(st.Accounts, accountStats(id, c))
			continue
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
	sort.Slice(st.Accounts, func(i, j int) bool { return st.Accounts[i].ID < st.Accounts[j].ID })
	return st, nil
}

// accountStats reads an account's row, decoded as a credential's (the
// script writes both alike): id is its ID without the '*'.
func accountStats(id string, c CredentialStats) AccountStats {
	a := AccountStats{
		ID: id, Account: c.Account, State: c.State, Keys: c.Groups, Limits: c.Limits, InFlight: c.InFlight,
		CoolingUntil: c.CoolingUntil, CoolingReason: c.CoolingReason, RestCause: c.RestCause, ScopeRests: c.ScopeRests,
		Pace: c.Pace, NextStart: c.NextStart, LastUsed: c.LastUsed, Starts: c.Starts, RateLimited: c.RateLimited,
	}
	if a.Keys == nil {
		a.Keys = []string{}
	}
	return a
}

// credFields is the shape of one credential or account in lua/stats.lua's
// reply.
const credFields = 25

func decodeCredential(e any, nowUS int64) (CredentialStats, error) {
	f, ok := e.([]any)
	if !ok || len(f) != credFields {
		return CredentialStats{}, fmt.Errorf("unexpected shape %T", e)
	}
	str := func(i int) (string, error) {
		s, ok := f[i].(string)
		if !ok {
			return "", fmt.Errorf("field %d is %T, want a string", i, f[i])
		}
		return s, nil
	}
	var c CredentialStats
	var err error
	var limits, refused, groups, account, keys string
	for _, x := range []struct {
		dst *string
		i   int
	}{{&c.ID, 0}, {&limits, 2}, {&c.DisabledReason, 4}, {&c.CoolingReason, 7}, {&c.RestCause, 8},
		{&c.DisabledBy, 16}, {&c.EnabledBy, 17}, {&c.EnabledReason, 18}, {&refused, 20}, {&groups, 21},
		{&account, 23}, {&keys, 24}} {
		if *x.dst, err = str(x.i); err != nil {
			return c, err
		}
	}
	var maxC, disabled, disabledAt, restUntil, paceUS, next, enabledAt int64
	for _, x := range []struct {
		dst *int64
		i   int
	}{{&maxC, 1}, {&disabled, 3}, {&disabledAt, 5}, {&restUntil, 6}, {&c.Starts, 10}, {&c.RateLimited, 11}, {&paceUS, 12}, {&next, 13},
		{&enabledAt, 19}} {
		if *x.dst, err = ratelimit.Int64(f[x.i]); err != nil {
			return c, fmt.Errorf("field %d: %w", x.i, err)
		}
	}
	lastUsed, err := ratelimit.Float64(f[9])
	if err != nil {
		return c, fmt.Errorf("last used: %w", err)
	}
	if c.Holders, err = decodeHolders(f[14]); err != nil {
		return c, err
	}
	ls := decodeLimits(limits)
	uses, ok := f[15].([]any)
	if !ok || len(uses) != 3*len(ls) {
		return c, fmt.Errorf("limit uses: unexpected shape %T for %d limits", f[15], len(ls))
	}
	c.Limits = []LimitStats{}
	for i, l := range ls {
		var v [3]int64
		for j := range v {
			if v[j], err = ratelimit.Int64(uses[3*i+j]); err != nil {
				return c, fmt.Errorf("limit %d use: %w", i, err)
			}
		}
		s := LimitStats{Limit: l.String(), Kind: l.Kind, Scope: l.Scope, Used: v[0], Of: v[1]}
		if v[2] > 0 {
			s.NextRoom = time.UnixMicro(v[2])
		}
		c.Limits = append(c.Limits, s)
		if l.Kind == LimitWindow && l.Scope == "" && c.Rate == "" {
			c.Rate = strings.TrimPrefix(l.String(), "rate=")
			c.StartsInWindow = int(v[0])
		}
	}
	c.MaxConcurrent = int(maxC)
	c.InFlight = len(c.Holders)
	c.Pace = time.Duration(paceUS) * time.Microsecond
	if lastUsed > 0 {
		c.LastUsed = time.UnixMicro(int64(lastUsed))
	}
	if restUntil > 0 {
		c.CoolingUntil = time.UnixMicro(restUntil)
	}
	if next > nowUS {
		c.NextStart = time.UnixMicro(next)
	}
	if refused != "" {
		c.Refusals = strings.Split(refused, "\n")
	}
	if groups != "" {
		c.Groups = strings.Split(groups, ",")
	}
	c.Account = strings.TrimPrefix(account, "*")
	if strings.HasPrefix(c.ID, "*") {
		// An account's row: its keys in the place of groups.
		c.Groups = nil
		if keys != "" {
			c.Groups = strings.Split(keys, ",")
		}
	}
	if c.ScopeRests, err = decodeScopeRests(f[22]); err != nil {
		return c, err
	}
	if disabled == 1 {
		c.DisabledAt = time.UnixMicro(disabledAt)
		if c.DisabledBy != DisabledByAPI {
			c.DisabledBy = DisabledByOperator
		}
		c.EnabledBy, c.EnabledReason = "", ""
	} else {
		c.DisabledReason, c.DisabledBy = "", ""
		if c.EnabledBy != "" && enabledAt > 0 {
			c.EnabledAt = time.UnixMicro(enabledAt)
		} else {
			c.EnabledBy, c.EnabledReason = "", ""
		}
	}
	switch {
	case disabled == 1:
		c.State = StateDisabled
	case restUntil > nowUS:
		c.State = StateCooling
	case next > nowUS:
		c.State = StateBusy
	default:
		c.State = StateAvailable
	}
	return c, nil
}

func decodeHolders(e any) ([]Holder, error) {
	leases, ok := e.([]any)
	if !ok || len(leases)%2 != 0 {
		return nil, fmt.Errorf("leases: unexpected shape %T", e)
	}
	var out []Holder
	for i := 0; i < len(leases); i += 2 {
		member, ok := leases[i].(string)
		if !ok {
			return nil, fmt.Errorf("lease member is %T", leases[i])
		}
		exp, err := ratelimit.Float64(leases[i+1])
		if err != nil {
			return nil, fmt.Errorf("lease expiry: %w", err)
		}
		tok, owner, _ := strings.Cut(member, "|")
		t, err := ratelimit.Int64(tok)
		if err != nil {
			return nil, fmt.Errorf("lease token: %w", err)
		}
		out = append(out, Holder{Owner: owner, Token: uint64(t), Expires: time.UnixMicro(int64(exp))})
	}
	return out, nil
}

// decodeScopeRests reads stats.lua's {scope, until_us, reason, ...}.
func decodeScopeRests(e any) ([]ScopeRest, error) {
	v, ok := e.([]any)
	if !ok || len(v)%3 != 0 {
		return nil, fmt.Errorf("scope rests: unexpected shape %T", e)
	}
	var out []ScopeRest
	for i := 0; i < len(v); i += 3 {
		scope, ok1 := v[i].(string)
		reason, ok2 := v[i+2].(string)
		until, err := ratelimit.Int64(v[i+1])
		if !ok1 || !ok2 || err != nil {
			return nil, fmt.Errorf("scope rest %d: unexpected shape", i/3)
		}
		out = append(out, ScopeRest{Scope: scope, Until: time.UnixMicro(until), Reason: reason})
	}
	return out, nil
}
