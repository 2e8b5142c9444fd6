package fakeapi

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Account is what the providers limit: an organization or project
// (OpenAI: "Rate limits are defined at the organization level and at the
// project level, not user level", platform.openai.com/docs/guides/rate-limits),
// an organization or workspace (Anthropic: "The API enforces
// service-configured limits at the organization level, but you may also
// set user-configurable limits for your organization's workspaces",
// docs.anthropic.com/en/api/rate-limits), an Azure resource. Every key of
// an account (Key.Account) draws on the account's limits, and each key's
// replies report the room they share. Strict mode only.
type Account struct {
	// ID names the account: in Key.Account, in Stats, and as the
	// organization of its 429s' messages. Required, unique.
	ID string
	// Rate: a bucket of Rate.N requests refilled continuously at Rate.N
	// per Rate.Period. Zero: unlimited.
	Rate ratelimit.Limit
	// Tokens: a bucket of Tokens.N tokens (input and output) refilled at
	// Tokens.N per Tokens.Period. Zero: unlimited.
	Tokens ratelimit.Limit
	// Models are the account's limits per model (buckets too), by the
	// name a request's "model" gives.
	Models map[string]ModelLimits
}

// accountState is an account's buckets and figures.
type accountState struct {
	id     string
	keys   []string // labels of its keys
	limits *bucketSet

	admitted    atomic.Int64
	tokens      atomic.Int64
	rateLimited atomic.Int64
}

// bucketSet is the strict limits of one holder, a key or an account: a
// request bucket, a token bucket and the same per model (nil: none). The
// strict state's limMu guards them.
type bucketSet struct {
	org          string // the organization its 429s name
	account      *accountState
	rate, tokens *bucket
	models       map[string]*bucketSet
}

func newBucketSet(org string, rate, tokens ratelimit.Limit, models map[string]ModelLimits, now time.Time) *bucketSet {
	s := &bucketSet{org: org}
	if !rate.IsZero() {
		s.rate = newBucket(rate, now)
	}
	if !tokens.IsZero() {
		s.tokens = newBucket(tokens, now)
	}
	for name, m := range models {
		if s.models == nil {
			s.models = map[string]*bucketSet{}
		}
		s.models[name] = newBucketSet(org, m.Rate, m.Tokens, nil, now)
	}
	return s
}

// checkAccounts checks cfg's accounts and the keys' references to them.
func checkAccounts(cfg Config) error {
	seen := map[string]int{}
	for i, a := range cfg.Accounts {
		if cfg.Provider == "" {
			return errors.New("fakeapi: accounts: only the strict mode (a provider) has accounts")
		}
		if a.ID == "" {
			return fmt.Errorf("fakeapi: accounts[%d]: id is empty", i)
		}
		if j, dup := seen[a.ID]; dup {
			return fmt.Errorf("fakeapi: accounts[%d]: same id %q as accounts[%d]", i, a.ID, j)
		}
		seen[a.ID] = i
		for what, l := range map[string]ratelimit.Limit{"rate": a.Rate, "tokens": a.Tokens} {
			if !l.IsZero() {
				if err := l.Validate(); err != nil {
					return fmt.Errorf("fakeapi: accounts[%d] (%s): %s: %w", i, a.ID, what, err)
				}
			}
		}
		if _, err := newModels(fmt.Sprintf("accounts[%d] (%s)", i, a.ID), a.Models); err != nil {
			return err
		}
	}
	for i, k := range cfg.Keys {
		if k.Account == "" {
			continue
		}
		if cfg.Provider == "" {
			return fmt.Errorf("fakeapi: keys[%d]: account %q: only the strict mode (a provider) has accounts", i, k.Account)
		}
		if _, ok := seen[k.Account]; !ok {
			return fmt.Errorf("fakeapi: keys[%d]: account %q is not in accounts", i, k.Account)
		}
	}
	return nil
}

// initLimits builds the strict mode's buckets: each key's own (Key.Rate,
// Key.Tokens, Key.Models, which the lenient mode keeps as windows: the
// key's windows are left without limits here) and each account's.
func (st *strictState) initLimits(s *Server, cfg Config) {
	now := time.Now()
	byID := map[string]*accountState{}
	for _, a := range cfg.Accounts {
		as := &accountState{id: a.ID, limits: newBucketSet(a.ID, a.Rate, a.Tokens, a.Models, now)}
		as.limits.account = as
		for _, m := range as.limits.models {
			m.account = as
		}
		st.accounts = append(st.accounts, as)
		byID[a.ID] = as
	}
	for i, k := range s.keys {
		kc := cfg.Keys[i]
		k.own = newBucketSet("org-test", kc.Rate, kc.Tokens, kc.Models, now)
		k.windows = windows{}
		for _, m := range k.models {
			m.windows = windows{}
		}
		if a := byID[kc.Account]; a != nil {
			k.account = a
			a.keys = append(a.keys, k.label)
		}
	}
}

// AccountStats are one account's figures (strict mode). A self-check for
// keys that share an account: RateLimited counts the 429s its own limits
// gave, which a client that keeps to the account's limits never sees, and
// Admitted stays within what its buckets allow (Rate.N at the start, then
// Rate.N per Rate.Period).
type AccountStats struct {
	ID string `json:"id"`
	// Keys are the labels of the keys that draw on it.
	Keys []string `json:"keys"`
	// Admitted counts the requests of its keys that its limits (and their
	// keys' own) admitted; Tokens, the tokens they took.
	Admitted int64 `json:"admitted"`
	Tokens   int64 `json:"tokens"`
	// RateLimited counts the requests refused with 429 by the account's
	// limits (its own or a model's).
	RateLimited int64 `json:"rate_limited"`
}

// accountStats are the accounts' figures, in Config.Accounts order.
func (st *strictState) accountStats() []AccountStats {
	var out []AccountStats
	for _, a := range st.accounts {
		out = append(out, AccountStats{ID: a.id, Keys: slices.Clone(a.keys), Admitted: a.admitted.Load(),
			Tokens: a.tokens.Load(), RateLimited: a.rateLimited.Load()})
	}
	return out
}

// accountModels are the models the accounts have limits for.
func accountModels(cfg Config) []string {
	var names []string
	for _, a := range cfg.Accounts {
		names = append(names, slices.Collect(maps.Keys(a.Models))...)
	}
	return names
}
