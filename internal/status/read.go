package status

import (
	"context"
	"fmt"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Read builds a Report from the queue and the pool. Its errors name what
// could not be read ("reading the queue: ..."); the report holds what was
// read before the error.
func Read(ctx context.Context, q *queue.Queue, pool *creds.Pool) (Report, error) {
	rep := Report{At: time.Now().UTC(), Workers: []Worker{}, Pool: Pool{Credentials: []Credential{}, Accounts: []Account{}},
		Accounts: []Account{}, Tenants: []Tenant{}, Fallbacks: []kftype.FallbackCount{}}
	qs, err := q.Stats(ctx)
	if err != nil {
		return rep, fmt.Errorf("reading the queue: %w", err)
	}
	rep.Stream = Stream{Name: qs.Stream.Name, Messages: qs.Stream.Messages, Bytes: qs.Stream.Bytes}
	rep.Consumer = Consumer{
		Name: qs.Consumer.Name, Pending: qs.Consumer.Pending, AckPending: qs.Consumer.AckPending,
		Backlog:     qs.Consumer.Pending + uint64(max(qs.Consumer.AckPending, 0)),
		Redelivered: qs.Consumer.Redelivered, WaitingPulls: qs.Consumer.Waiting, LastActive: TimePtr(qs.Consumer.LastActive),
	}
	rep.DeadLetters, rep.Results = qs.DeadLetters, qs.Results
	ws, err := q.Workers(ctx)
	if err != nil {
		return rep, fmt.Errorf("reading the worker registry: %w", err)
	}
	rep.Workers = WorkersReport(ws)
	rep.Fallbacks = Fallbacks(rep.Workers)
	ps, err := pool.Stats(ctx)
	if err != nil {
		return rep, fmt.Errorf("reading the credential pool: %w", err)
	}
	rep.Pool = PoolReport(ps)
	rep.Accounts = rep.Pool.Accounts
	return rep, nil
}

// WorkersReport turns the registry's entries into report rows.
func WorkersReport(ws []queue.WorkerInfo) []Worker {
	out := make([]Worker, 0, len(ws))
	for _, w := range ws {
		if w.Kinds == nil {
			w.Kinds = []string{}
		}
		if w.Fallbacks == nil {
			w.Fallbacks = []kftype.FallbackCount{}
		}
		out = append(out, w)
	}
	return out
}

// Fallbacks sums the workers' fallback counts.
func Fallbacks(ws []Worker) []kftype.FallbackCount {
	lists := make([][]kftype.FallbackCount, len(ws))
	for i, w := range ws {
		lists[i] = w.Fallbacks
	}
	return kftype.SumFallbacks(lists...)
}

// PoolReport turns the pool's stats into the report's pool object.
func PoolReport(st creds.Stats) Pool {
	out := Pool{Name: st.Pool, At: st.At, Counts: st.Counts, Credentials: []Credential{}, Accounts: []Account{}}
	for _, c := range st.Credentials {
		out.Credentials = append(out.Credentials, credentialReport(c))
	}
	for _, a := range st.Accounts {
		out.Accounts = append(out.Accounts, accountReport(a))
	}
	return out
}

func limitsReport(ls []creds.LimitStats) []Limit {
	out := []Limit{}
	for _, l := range ls {
		out = append(out, Limit{Limit: l.Limit, Kind: string(l.Kind), Scope: l.Scope, Used: l.Used, Of: l.Of, NextRoom: TimePtr(l.NextRoom)})
	}
	return out
}

func accountReport(a creds.AccountStats) Account {
	row := Account{
		ID: a.ID, Account: a.Account, State: a.State, Keys: append([]string{}, a.Keys...), Limits: limitsReport(a.Limits),
		InFlight: a.InFlight, ScopeRests: append([]creds.ScopeRest{}, a.ScopeRests...),
		PaceMS: float64(a.Pace.Microseconds()) / 1000, NextStart: TimePtr(a.NextStart), LastUsed: TimePtr(a.LastUsed),
		Starts: a.Starts, RateLimited: a.RateLimited,
	}
	if a.State == creds.StateCooling {
		row.CoolingUntil = TimePtr(a.CoolingUntil)
		row.CoolingReason, row.RestCause = a.CoolingReason, a.RestCause
	}
	return row
}

func credentialReport(c creds.CredentialStats) Credential {
	row := Credential{
		ID: c.ID, State: c.State, MaxConcurrent: c.MaxConcurrent, Groups: append([]string{}, c.Groups...), Rate: c.Rate, InFlight: c.InFlight,
		Holders: []Holder{}, CoolingReason: c.CoolingReason, DisabledReason: c.DisabledReason,
		DisabledAt: TimePtr(c.DisabledAt), StartsInWindow: c.StartsInWindow, LastUsed: TimePtr(c.LastUsed),
		Starts: c.Starts, RateLimited: c.RateLimited, Limits: limitsReport(c.Limits), Account: c.Account,
		PaceMS: float64(c.Pace.Microseconds()) / 1000, NextStart: TimePtr(c.NextStart),
		DisabledBy: c.DisabledBy, Refusals: append([]string{}, c.Refusals...),
		EnabledBy: c.EnabledBy, EnabledReason: c.EnabledReason, EnabledAt: TimePtr(c.EnabledAt),
	}
	row.ScopeRests = append([]creds.ScopeRest{}, c.ScopeRests...)
	if c.State == creds.StateCooling {
		row.CoolingUntil = TimePtr(c.CoolingUntil)
		row.RestCause = c.RestCause
	} else {
		row.CoolingReason = ""
	}
	for _, h := range c.Holders {
		row.Holders = append(row.Holders, Holder{Owner: h.Owner, Expires: h.Expires})
	}
	return row
}
