package creds

import (
	"context"
	"fmt"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Register adds credentials to the pool, or syncs their definitions. A
// credential new to the pool gets the given limits. For one already there,
// the limits are replaced only if the definition changed since it was last
// registered, so a limit changed at run time with SetLimits survives other
// processes starting with the same definitions; disabled states and
// cooldowns are kept. Credentials not in defs are left alone (Remove takes
// one out). Every invalid definition is reported, each naming its field.
func (p *Pool) Register(ctx context.Context, defs []Credential) error {
	limits, err := parseDefs(defs)
	if err != nil {
		return err
	}
	args := make([]any, 0, 1+4*len(defs))
	args = append(args, p.instance)
	for i, d := range defs {
		args = append(args, d.ID, d.MaxConcurrent, limits[i].N, limits[i].Period.Microseconds())
	}
	if err := registerScript.Run(ctx, p.scripts, []string{p.keys.creds, p.keys.fence}, args...).Err(); err != nil {
		return fmt.Errorf("creds: register %d credentials in pool %q: %w", len(defs), p.name, err)
	}
	p.wakeHead()
	return nil
}

// Limits is a change of a credential's limits; nil fields stay as they are.
type Limits struct {
	MaxConcurrent *int
	// Rate: "N/PERIOD", or "" to remove the rate limit.
	Rate *string
}

// SetLimits changes a credential's limits for every process at once; the
// next acquire anywhere applies them.
func (p *Pool) SetLimits(ctx context.Context, id string, l Limits) error {
	maxArg, rateN, rateUS := "", "", ""
	if l.MaxConcurrent != nil {
		if *l.MaxConcurrent < 1 {
			return fmt.Errorf("%w: max_concurrent must be at least 1, got %d", ErrInvalid, *l.MaxConcurrent)
		}
		maxArg = fmt.Sprint(*l.MaxConcurrent)
	}
	if l.Rate != nil {
		rateN, rateUS = "0", "0"
		if *l.Rate != "" {
			lim, err := ratelimit.ParseLimit(*l.Rate)
			if err != nil {
				return fmt.Errorf("%w: rate: %w", ErrInvalid, err)
			}
			rateN, rateUS = fmt.Sprint(lim.N), fmt.Sprint(lim.Period.Microseconds())
		}
	}
	_, err := p.admin(ctx, id, "limits", maxArg, rateN, rateUS)
	if err == nil {
		p.wakeHead()
	}
	return err
}

// Disable takes a credential out of use until Enable; leases held on it
// run to their end.
func (p *Pool) Disable(ctx context.Context, id, reason string) error {
	_, err := p.admin(ctx, id, "disable", reason)
	return err
}

// Enable makes a credential usable again: it clears the disabled state and
// any cooldown, and wakes waiters.
func (p *Pool) Enable(ctx context.Context, id string) error {
	_, err := p.admin(ctx, id, "enable")
	if err == nil {
		p.wakeHead()
	}
	return err
}

// MarkCooling makes a credential unusable for d without releasing any lease
// (a holder learnt the key is rate limited). A longer cooldown already in
// place is kept. It returns the cooldown's end on Redis's clock.
func (p *Pool) MarkCooling(ctx context.Context, id string, d time.Duration, reason string) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: cooldown must be positive, got %s", ErrInvalid, d)
	}
	us, err := p.admin(ctx, id, "cool", fmt.Sprint(d.Microseconds()), reason)
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
	argv := make([]any, 0, 3+len(args))
	argv = append(argv, id, op)
	for _, a := range args {
		argv = append(argv, a)
	}
	argv = append(argv, p.instance)
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
