package creds

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Lease is the right to use one credential until Expires, renewable. Its
// fields do not change after Acquire: Renew returns the new expiry.
type Lease struct {
	// CredentialID is the leased credential.
	CredentialID string
	// Token is the fencing token: strictly increasing across the pool.
	Token uint64
	// Owner is who acquired it.
	Owner string
	// Cost is the estimate charged to the credential's cost limits.
	Cost int64
	// Scope is the Request's: the scoped limits it was charged to, and
	// what its release's rests apply to (that scope only, when the
	// credential has limits of it).
	Scope string
	// Acquired and Expires are on Redis's clock.
	Acquired, Expires time.Time
	// RequestedAt is, on this process's clock, a moment no later than the
	// lease was granted: when the call that made the lease this handle's
	// was sent, or, for a lease another handle's call granted (its message
	// delivered it), the grant mapped from Redis's clock by this handle's
	// last call. The lease lives at least until RequestedAt plus the lease
	// TTL (a holder that must not outlive its lease counts from here,
	// whatever the clocks of other machines say).
	RequestedAt time.Time

	member string
}

// Renew extends the lease by the pool's lease TTL from now and returns the
// new expiry (on Redis's clock). It fails with ErrLeaseLost, changing
// nothing, when the lease expired, was released or its credential removed.
func (p *Pool) Renew(ctx context.Context, l *Lease) (time.Time, error) {
	// Through the client given to New, not WithScripter's: a renewal must
	// end by its deadline, and renewals are few.
	reply, err := renewScript.Run(ctx, p.rdb, []string{p.keys.creds}, l.CredentialID, l.member, p.ttl.Microseconds()).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("creds: renew lease %d on %q: %w", l.Token, l.CredentialID, err)
	}
	v, err := ratelimit.Int64s(reply, 2)
	if err != nil {
		return time.Time{}, fmt.Errorf("creds: renew: %w", err)
	}
	if v[0] == 0 {
		return time.Time{}, fmt.Errorf("%w: lease %d on %q (expired or released)", ErrLeaseLost, l.Token, l.CredentialID)
	}
	return time.UnixMicro(v[0]), nil
}

// Outcome is how a run on a leased credential went, for Settle.
type Outcome struct {
	// Cost is what the start really cost, when known; it replaces the
	// estimate in every cost window the start was charged to. 0: keep the
	// estimate.
	Cost int64
	// RateLimited: the API refused the run for its rate (a 429). With a
	// Rest (the API said how long: Retry-After), the key rests that long.
	// Without one (a bare 429), the key's pace adapts fleet-wide: a short
	// rest and wider spacing of its starts, widened further by each
	// further bare 429 and narrowed again by each success, the rest never
	// longer than MaxRest.
	RateLimited bool
	// Rest makes the credential rest for this long after the release; a
	// longer rest already in place is kept.
	Rest time.Duration
	// MaxRest bounds the rest after a bare 429 (0: no rest, only a wider
	// pace).
	MaxRest time.Duration
	// RestReason says why it rests (shown by Stats); RestCause names the
	// signal ("retry-after header", ...).
	RestReason, RestCause string
	// Signals are the API's own figures about the key (rate-limit headers):
	// when they say it cannot take the next start, it rests until their
	// reset.
	Signals []Signal
	// Disable takes the credential out of use, with this reason, until
	// Enable (or a probe: the credential is marked disabled by the API).
	Disable string
	// Refused reports that the API refused the run on this credential
	// (401, 402, 403, insufficient quota): one piece of evidence, not a
	// verdict. The credential is disabled when it has refused RefusalsToDisable
	// different items in a row (Item tells them apart); a run it was not
	// refused on ends the streak. An item refused by every key is the
	// item's fault, and alone it never disables a key.
	Refused *Refusal
	// Unused: the lease ends without having been used (its holder gave it
	// back before any request): it says nothing about the key, so its pace
	// and its streak of refusals stay as they are.
	Unused bool
	// Sent is when the run's request left, on this process's clock (zero:
	// unknown). An API counts a request when it arrives; the pool charged
	// the start when it granted the lease, a moment earlier, and that
	// moment varies from start to start. With Sent, the start counts in
	// the credential's windows (and its smooth limits) from then instead:
	// it leaves them no earlier than the API's. The pool maps it onto
	// Redis's clock by the lease's own step (from RequestedAt), which
	// errs late by the step's way to Redis, never early; it is kept
	// between the grant and the release.
	Sent time.Time
}

// Refusal is a refused run: which item, and what the API said.
type Refusal struct {
	// Item identifies the item (batch and ID); the streak counts distinct
	// items.
	Item string
	// Reason is the API's answer, shown as the disabled reason.
	Reason string
}

// RefusalsToDisable is how many different items a credential must refuse
// in a row before the pool disables it.
const RefusalsToDisable = 3

// Signal is one figure an API reported about a key's remaining room, such
// as OpenAI's x-ratelimit-remaining-tokens with its reset.
type Signal struct {
	// Name of the signal (the header), shown as the cause of a rest.
	Name string
	// Tokens: the figure counts cost units (compared with the estimated
	// cost of the runs in flight plus the next); else requests.
	Tokens bool
	// Remaining is what is left, Reset when it is whole again.
	Remaining int64
	Reset     time.Duration
	// Limit is the whole of it (0: not told). With it, the pool learns
	// the refill rate the figures imply ((Limit-Remaining)/Reset, since
	// both providers' limits are token buckets that refill continuously):
	// a key short of room rests only until enough has refilled for its
	// next start, and its starts are then spaced at that rate.
	Limit int64
}

// Release ends the lease: the credential is free again, and the waiter
// that has waited longest gets it.
func (p *Pool) Release(ctx context.Context, l *Lease) error {
	return p.Settle(ctx, l, Outcome{})
}

// ReleaseUnused ends a lease its holder never used (no request was
// made): like Release, but it changes nothing of what the pool learnt
// about the key (its pace, its refusals).
func (p *Pool) ReleaseUnused(ctx context.Context, l *Lease) error {
	return p.Settle(ctx, l, Outcome{Unused: true})
}

// ReleaseCooldown ends the lease and makes the credential rest for d (the
// backoff after a rate limit); reason says why, for stats. A longer rest
// already in place is kept.
func (p *Pool) ReleaseCooldown(ctx context.Context, l *Lease, d time.Duration, reason string) error {
	if d <= 0 {
		return fmt.Errorf("%w: cooldown must be positive, got %s", ErrInvalid, d)
	}
	return p.Settle(ctx, l, Outcome{RateLimited: true, Rest: d, RestReason: reason})
}

// ReleaseDisable ends the lease and disables the credential at once, until
// Enable. An API's refusal is not this: report it as Outcome.Refused,
// which disables a credential only once it has refused RefusalsToDisable
// different items in a row.
func (p *Pool) ReleaseDisable(ctx context.Context, l *Lease, reason string) error {
	if reason == "" {
		reason = "disabled"
	}
	return p.Settle(ctx, l, Outcome{Disable: reason})
}

// Settle ends the lease with the run's outcome, in one atomic step: the
// real cost replaces the estimate, the credential rests or is disabled as
// told, and freed capacity goes to the longest-waiting waiter. It fails
// with ErrLeaseLost when the lease was not live any more (the cost is
// reconciled anyway).
func (p *Pool) Settle(ctx context.Context, l *Lease, o Outcome) error {
	res, err := p.settleOp(l, o)
	if err != nil {
		return err
	}
	select {
	case err := <-res:
		return settleErr(l, err)
	case <-ctx.Done():
		return fmt.Errorf("creds: release lease %d on %q: %w", l.Token, l.CredentialID, context.Cause(ctx))
	}
}

// SettleAsync ends the lease like Settle without waiting: the lease's end
// goes out with the handle's next step, together with whatever the process
// asks for meanwhile (its next Acquire, say), and done, when not nil, gets
// the outcome later from another goroutine. An invalid outcome is reported
// at once.
func (p *Pool) SettleAsync(l *Lease, o Outcome, done func(error)) error {
	res, err := p.settleOp(l, o)
	if err != nil {
		return err
	}
	go func() {
		err := settleErr(l, <-res)
		if done != nil {
			done(err)
		}
	}()
	return nil
}

func settleErr(l *Lease, err error) error {
	if err != nil {
		return fmt.Errorf("creds: release lease %d on %q: %w", l.Token, l.CredentialID, err)
	}
	return nil
}

// settleOp checks an outcome and queues the lease's end; the channel gets
// its result.
func (p *Pool) settleOp(l *Lease, o Outcome) (chan error, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil lease", ErrInvalid)
	}
	mode, dur, text := "ok", time.Duration(0), ""
	clean := func(s string) string { return strings.NewReplacer("\t", " ", ";", ",").Replace(s) }
	switch {
	case o.Rest < 0 || o.MaxRest < 0:
		return nil, fmt.Errorf("%w: rest must not be negative, got %s (max %s)", ErrInvalid, o.Rest, o.MaxRest)
	case o.Disable != "":
		mode, text = "disable", o.Disable
	case o.Unused:
		mode = "unused"
	case o.Refused != nil:
		// An item ID may hold anything: the streak compares it only, so a
		// line break in it is flattened.
		item := strings.NewReplacer("\n", " ", "\t", " ").Replace(o.Refused.Item)
		mode, text = "refuse", item+"\t"+strings.ReplaceAll(o.Refused.Reason, "\n", " ")
	case o.RateLimited && o.Rest == 0:
		mode, dur, text = "bare429", o.MaxRest, clean(o.RestReason)
	case o.Rest > 0:
		mode, dur = "rest", o.Rest
		text = clean(o.RestReason) + "\t" + clean(o.RestCause)
	}
	var sig strings.Builder
	for _, s := range o.Signals {
		if s.Reset < 0 || s.Remaining < 0 || s.Limit < 0 || (s.Reset == 0 && s.Limit == 0) {
			continue // nothing to learn: no reset, and no limit to learn a rate from
		}
		kind := "req"
		if s.Tokens {
			kind = "tok"
		}
		fmt.Fprintf(&sig, "%s:%d:%d:%d:%s;", kind, s.Remaining, s.Reset.Microseconds(), s.Limit,
			strings.NewReplacer(":", "-", ";", ",").Replace(s.Name))
	}
	real := int64(-1)
	if o.Cost > 0 {
		real = o.Cost
	}
	return p.d.release(l, real, mode, dur, text, sig.String(), p.sentOnRedis(l, o.Sent)), nil
}

// sentOnRedis maps a moment of this process's clock after the lease was
// acquired onto Redis's clock, in µs (0: unknown). The lease was granted
// or made this handle's on Redis at Expires − TTL or earlier (a grant by
// a handle with a longer TTL), and this process's clock read RequestedAt
// or later at that moment: Expires − TTL plus the time from RequestedAt
// to sent is no earlier than sent on Redis's clock.
func (p *Pool) sentOnRedis(l *Lease, sent time.Time) int64 {
	if sent.IsZero() || l.RequestedAt.IsZero() || l.Expires.IsZero() || sent.Before(l.RequestedAt) {
		return 0
	}
	return l.Expires.Add(-p.ttl).Add(sent.Sub(l.RequestedAt)).UnixMicro()
}
