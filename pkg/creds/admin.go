package creds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Register adds credentials to the pool, or syncs their definitions. A
// credential new to the pool gets the given limits. For one already there,
// the limits are replaced only if the definition changed since it was last
// registered, so a limit changed at run time with SetLimits survives other
// processes starting with the same definitions; disabled states, rests and
// counters are kept. Credentials not in defs are left alone (Remove takes
// one out). Every invalid definition is reported, each naming its field.
//
// Register sets the pool's reserve to 0; Define registers accounts and a
// reserve too.
func (p *Pool) Register(ctx context.Context, defs []Credential) error {
	return p.Define(ctx, Definitions{Credentials: defs})
}

// Limits is a change of a credential's limits; nil fields stay as they are.
type Limits struct {
	MaxConcurrent *int
	// Rate: "N/PERIOD", or "" to remove every limit; short for Limits
	// holding that one exact-window limit.
	Rate *string
	// Limits replaces every limit of the credential (empty: none).
	Limits *[]Limit
}

// SetLimits changes a credential's limits for every process at once; the
// next decision anywhere applies them. A limit kept across the change
// keeps its history (the starts and costs in its window).
func (p *Pool) SetLimits(ctx context.Context, id string, l Limits) error {
	maxArg, lims := "", "-"
	if l.MaxConcurrent != nil {
		if *l.MaxConcurrent < 1 {
			return fmt.Errorf("%w: max_concurrent must be at least 1, got %d", ErrInvalid, *l.MaxConcurrent)
		}
		maxArg = strconv.Itoa(*l.MaxConcurrent)
	}
	var set []Limit
	if l.Rate != nil {
		lims = ""
		if *l.Rate != "" {
			r, err := ratelimit.ParseLimit(*l.Rate)
			if err != nil {
				return fmt.Errorf("%w: rate: %w", ErrInvalid, err)
			}
			set = append(set, RateLimit(r))
		}
	}
	if l.Limits != nil {
		lims = ""
		for i, x := range *l.Limits {
			if err := x.Validate(); err != nil {
				return fmt.Errorf("%w: limits[%d]: %w", ErrInvalid, i, err)
			}
		}
		set = append(set, *l.Limits...)
	}
	if lims != "-" {
		lims = encodeLimits(set)
	}
	_, err := p.admin(ctx, id, "limits", maxArg, lims)
	return err
}

// Who disabled a credential (CredentialStats.DisabledBy) and who enabled
// it again (CredentialStats.EnabledBy).
const (
	// DisabledByAPI: the pool disabled it on the API's evidence (a rejected
	// key, a streak of refusals); probes may enable it again.
	DisabledByAPI = "api"
	// DisabledByOperator: Disable did (producer creds disable, the
	// dashboard), or a pool of an older version that did not record who;
	// only Enable brings it back.
	DisabledByOperator = "operator"
	// EnabledByProbe: EnableAfterProbe did, with the probe's cause.
	EnabledByProbe = "probe"
	// EnabledByOperator: Enable did.
	EnabledByOperator = "operator"
)

// Disable takes a credential out of use until Enable, as an operator's
// decision: no probe enables it again. Leases held on it run to their
// end.
func (p *Pool) Disable(ctx context.Context, id, reason string) error {
	_, err := p.admin(ctx, id, "disable", reason)
	return err
}

// Enable makes a credential usable again: it clears the disabled state,
// any rest, any learnt pace and any streak of refusals, and hands it to a
// waiter.
func (p *Pool) Enable(ctx context.Context, id string) error {
	_, err := p.admin(ctx, id, "enable")
	return err
}

// EnableAfterProbe enables a credential the API disabled, after a probe
// found that it works again; cause says what the probe saw ("probe GET
// https://api.example.com/v1/models answered 200") and is kept as the
// credential's EnabledReason. It does so, in one atomic step, only while
// the credential is still disabled by the API: a credential an operator
// disabled (even after the probe began), or one enabled meanwhile, is left
// alone and EnableAfterProbe reports false. Enabling clears what Enable
// clears and hands the credential to a waiter.
func (p *Pool) EnableAfterProbe(ctx context.Context, id, cause string) (bool, error) {
	n, err := p.admin(ctx, id, "probed", cause)
	return n == 1, err
}

// MarkCooling makes a credential rest for d without releasing any lease (a
// holder learnt the key is rate limited). A longer rest already in place
// is kept. It returns the rest's end on Redis's clock.
func (p *Pool) MarkCooling(ctx context.Context, id string, d time.Duration, reason string) (time.Time, error) {
	return p.Rest(ctx, id, d, reason, "")
}

// Rest makes a credential rest for d, saying why (reason) and which
// signal told (cause); a longer rest in place is kept. It returns the
// rest's end on Redis's clock.
func (p *Pool) Rest(ctx context.Context, id string, d time.Duration, reason, cause string) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: rest must be positive, got %s", ErrInvalid, d)
	}
	us, err := p.admin(ctx, id, "rest", strconv.FormatInt(d.Microseconds(), 10), reason, cause)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(us), nil
}

// Remove deletes a credential and its state from the pool. Live leases on
// it fail at their next renewal.
func (p *Pool) Remove(ctx context.Context, id string) error {
	_, err := p.admin(ctx, id, "remove")
	return err
}

func (p *Pool) admin(ctx context.Context, id, op string, args ...string) (int64, error) {
	return p.adminEntity(ctx, id, id, op, args...)
}

// adminAccount is admin for account id.
func (p *Pool) adminAccount(ctx context.Context, id, op string, args ...string) (int64, error) {
	n, err := p.adminEntity(ctx, acctEntity(id), id, op, args...)
	if errors.Is(err, ErrNoSuchCredential) {
		return 0, fmt.Errorf("%w: %q in pool %q", ErrNoSuchAccount, id, p.name)
	}
	return n, err
}

// adminEntity runs lua/admin.lua's op on entity (a credential's ID, or an
// account's "*<id>"), named id in errors.
func (p *Pool) adminEntity(ctx context.Context, entity, id, op string, args ...string) (int64, error) {
	argv := make([]any, 0, 3+len(args))
	argv = append(argv, entity, p.waiterTTL.Microseconds(), op)
	for _, a := range args {
		argv = append(argv, a)
	}
	reply, err := adminScript.Run(ctx, p.scripts, []string{p.keys.creds}, argv...).Result()
	if err != nil {
		return 0, fmt.Errorf("creds: %s %q in pool %q: %w", op, id, p.name, err)
	}
	n, err := ratelimit.Int64(reply)
	if err != nil {
		return 0, fmt.Errorf("creds: %s: %w", op, err)
	}
	if n == -1 {
		return 0, fmt.Errorf("%w: %q in pool %q", ErrNoSuchCredential, id, p.name)
	}
	return n, nil
}
