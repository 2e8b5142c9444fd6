// Package status builds the view of the fleet that `producer status` and
// `producer dashboard` show: the work stream, the workers' consumers, the
// dead letters and results kept, the workers heard from recently and the
// credential pool. Front ends only format a Report; they never assemble
// one themselves, so the CLI and the web page cannot disagree.
package status

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Report is the object `producer status --json` prints: a stable schema,
// every key always present (times are RFC 3339 strings, or null when there
// is none; lists are [] when empty). Keys may be added, never removed.
//
//	{
//	  "at":       time the status was read (the producer's clock)
//	  "stream":   {"name", "messages", "bytes"}  the work stream: items waiting or running
//	  "consumer": {"name"           queue.consumer (the lanes' consumers are named after it)
//	               "pending"        items not yet delivered to a worker
//	               "ack_pending"    items delivered and not yet settled (running or waiting for a credential)
//	               "backlog"        pending + ack_pending: every item not yet settled (what an autoscaler reads)
//	               "redelivered"    of those, delivered more than once
//	               "waiting_pulls"  pull requests of idle worker slots
//	               "last_active"}   the consumer's last delivery (null: never)
//	  "dead_letters": dead-letter records (`producer dlq list`)
//	  "results":      result records kept (`producer results`)
//	  "tenants":  [{"name", "weight", "budget" (null: none), "period" (d|w|mo),
//	                "period_id", "period_end", "spent", "reserved"}]  the current period's
//	  "workers":  [{"id", "host", "pid", "version", "state" (running|draining),
//	                "concurrency", "busy", "done", "failed", "kinds", "fallbacks", "started_at", "last_seen",
//	                "gateway" (only on a worker serving it: {"listen", "requests", "errors", "in_flight"})}]
//	              workers heard from within the heartbeat TTL, by id
//	  "fallbacks": [{"kind", "to", "why" (waited|failing), "items"}]  items of a kind that ran
//	              on one of its fallback kinds, and why: the sums of the workers' (since each started)
//	  "pool":     {"name", "at" (Redis's clock),
//	               "total", "available", "leased", "cooling", "disabled",
//	               "in_flight"      live leases in the pool
//	               "waiting"        acquires queued fleet-wide for a credential
//	               "credentials": [{"id",
//	                 "state"          available | busy (at its limits) | cooling | disabled
//	                 "max_concurrent", "rate" ("" when none, else N/period),
//	                 "in_flight"      leases held now
//	                 "holders"        [{"owner" (worker/item), "expires"}]
//	                 "limits"         [{"limit" (rate=10/s,burst=1 | rate=500/m | cost=30000/m),
//	                                    "kind" (rate | smooth | cost), "used", "of",
//	                                    "next_room" (null: room now)}]
//	                 "cooling_until", "cooling_reason", "rest_cause"  why it rests, which
//	                                  signal told (null and "" unless cooling)
//	                 "pace_ms"        spacing of starts learnt from bare 429s (0: none)
//	                 "next_start"     when it can take a start (null: now, or disabled)
//	                 "disabled_reason", "disabled_at"   ("" and null unless disabled)
//	                 "disabled_by"    api (probes may enable it again) | operator ("" unless disabled)
//	                 "refusals"       the items the API refused on it in a row, "<batch>/<item>: <reason>"
//	                 "enabled_by", "enabled_reason", "enabled_at"   its last enable: probe (with
//	                                  the probe's answer) | operator; "", "" and null when none or disabled
//	                 "starts_in_window"  starts in the window of "rate" (0 without one)
//	                 "last_used",
//	                 "starts"         leases granted so far (cumulative)
//	                 "rate_limited"}]} rate-limited runs so far (cumulative)
//	}
//
// available + busy + cooling + disabled = total; leased counts the
// credentials holding at least one lease, whatever their state.
type Report struct {
	At          time.Time `json:"at"`
	Stream      Stream    `json:"stream"`
	Consumer    Consumer  `json:"consumer"`
	DeadLetters uint64    `json:"dead_letters"`
	Results     uint64    `json:"results"`
	Workers     []Worker  `json:"workers"`
	Pool        Pool      `json:"pool"`
	// Accounts are the pool's accounts (Pool.Accounts, at the top as
	// well, where the fleet's limits are looked for first); [] when none.
	Accounts []Account `json:"accounts"`
	// Tenants are the configuration's tenants with their spend in the
	// current period (Tenants); [] when none.
	Tenants []Tenant `json:"tenants"`
	// Fallbacks count the items of each kind that ran on one of its
	// fallback kinds, by fallback kind and why (waited, failing): the
	// sums of what the workers heard from count since each started
	// (Workers[].Fallbacks); [] when none.
	Fallbacks []kftype.FallbackCount `json:"fallbacks"`
}

// Stream is the work stream.
type Stream struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

// Consumer is the workers' consumers, summed: one per lane of a batch,
// each named after queue.consumer (Name). No single JetStream consumer
// holds the backlog, so an autoscaler reads Backlog here (KEDA's
// metrics-api scaler at consumer.backlog of the dashboard's /api/status),
// not a consumer's figures on the NATS monitoring port.
type Consumer struct {
	Name       string `json:"name"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	// Backlog is Pending + AckPending: every item not yet settled
	// (waiting, running, waiting for a key or for a redelivery).
	Backlog      uint64     `json:"backlog"`
	Redelivered  int        `json:"redelivered"`
	WaitingPulls int        `json:"waiting_pulls"`
	LastActive   *time.Time `json:"last_active"`
}

// Worker is one worker process heard from within the heartbeat TTL: its
// entry in the registry, as it announced itself.
type Worker = queue.WorkerInfo

// Pool is the credential pool, read in one atomic script on Redis's clock.
type Pool struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	// Counts are its credentials by state, its live leases (in_flight) and
	// the acquires queued fleet-wide for a credential (waiting).
	creds.Counts
	Credentials []Credential `json:"credentials"`
	// Accounts are what the APIs limit rather than a key: each with its
	// limits and their use, its keys and any rest with its cause.
	Accounts []Account `json:"accounts"`
}

// Account is one account of the pool (pool.accounts): its keys draw on
// its limits together, and a reply to one of them rests or paces all of
// them.
type Account struct {
	ID string `json:"id"`
	// Account is the enclosing account ("" none).
	Account string `json:"account"`
	// State: available, busy (at its limits, or an enclosing account's),
	// cooling (resting: see CoolingReason and RestCause).
	State    string   `json:"state"`
	Keys     []string `json:"keys"`
	Limits   []Limit  `json:"limits"`
	InFlight int      `json:"in_flight"`
	// CoolingUntil, CoolingReason and RestCause: its rest while it lasts.
	CoolingUntil  *time.Time        `json:"cooling_until"`
	CoolingReason string            `json:"cooling_reason"`
	RestCause     string            `json:"rest_cause"`
	ScopeRests    []creds.ScopeRest `json:"scope_rests"`
	// PaceMS is the spacing of its starts learnt from bare 429s (0 none).
	PaceMS      float64    `json:"pace_ms"`
	NextStart   *time.Time `json:"next_start"`
	LastUsed    *time.Time `json:"last_used"`
	Starts      int64      `json:"starts"`
	RateLimited int64      `json:"rate_limited"`
}

// Credential is one row of the pool. It names the credential; it never
// holds its secret (the pool has none to give).
type Credential struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	MaxConcurrent int    `json:"max_concurrent"`
	// Groups are the key groups it is in (a kind's credentials name them).
	Groups []string `json:"groups"`
	// Account is the account it belongs to ("" none: its own).
	Account      string     `json:"account"`
	Rate         string     `json:"rate"`
	InFlight     int        `json:"in_flight"`
	Holders      []Holder   `json:"holders"`
	CoolingUntil *time.Time `json:"cooling_until"`
	// ScopeRests are rests of one scope only: the key takes starts of
	// other scopes meanwhile.
	ScopeRests     []creds.ScopeRest `json:"scope_rests"`
	CoolingReason  string            `json:"cooling_reason"`
	DisabledReason string            `json:"disabled_reason"`
	DisabledAt     *time.Time        `json:"disabled_at"`
	StartsInWindow int               `json:"starts_in_window"`
	LastUsed       *time.Time        `json:"last_used"`
	Starts         int64             `json:"starts"`
	RateLimited    int64             `json:"rate_limited"`
	// Limits are every limit of the credential with its use now.
	Limits []Limit `json:"limits"`
	// RestCause names the signal behind a rest (a header, a bare 429, a
	// Retry-After); "" unless cooling.
	RestCause string `json:"rest_cause"`
	// PaceMS is the spacing of starts learnt from bare 429s, in
	// milliseconds; 0 when none.
	PaceMS float64 `json:"pace_ms"`
	// NextStart is when it can take a start; null when now (or disabled).
	NextStart *time.Time `json:"next_start"`
	// DisabledBy says who disabled it (creds.DisabledByAPI or
	// creds.DisabledByOperator); Refusals are the API's refusals in a row;
	// EnabledBy, EnabledReason and EnabledAt its last enable.
	DisabledBy    string     `json:"disabled_by"`
	Refusals      []string   `json:"refusals"`
	EnabledBy     string     `json:"enabled_by"`
	EnabledReason string     `json:"enabled_reason"`
	EnabledAt     *time.Time `json:"enabled_at"`
}

// Limit is one limit of a credential and its use in its window now.
type Limit struct {
	// Limit as `producer creds set --limit` takes it: rate=10/s,burst=1.
	Limit string `json:"limit"`
	// Kind: rate (exact window of starts), smooth (GCRA), cost.
	Kind string `json:"kind"`
	// Scope: the limit binds only items of this scope ("": every item).
	Scope string `json:"scope"`
	// Used of Of: starts or cost units in the window; for a smooth rate,
	// the burst's cells in use.
	Used int64 `json:"used"`
	Of   int64 `json:"of"`
	// NextRoom is when it takes another start; null when now.
	NextRoom *time.Time `json:"next_room"`
}

// Holder is one live lease.
type Holder struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

// TimePtr is t, or nil for the zero time (a JSON null).
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
