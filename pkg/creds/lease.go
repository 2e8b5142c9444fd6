package creds

import (
	"context"
	"fmt"
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
	// Acquired and Expires are on Redis's clock.
	Acquired, Expires time.Time
	// RequestedAt is when the acquire that granted the lease was sent, on
	// this process's clock: the lease lives at least until RequestedAt plus
	// the lease TTL (a holder that must not outlive its lease counts from
	// here, whatever the clocks of other machines say).
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

// Release ends the lease: the credential is free again, and waiters
// everywhere are woken.
func (p *Pool) Release(ctx context.Context, l *Lease) error {
	return p.release(ctx, l, "ok", 0, "")
}

// ReleaseCooldown ends the lease and makes the credential unusable for d
// (the backoff after a rate limit); reason says why, for stats. A longer
// cooldown already in place is kept.
func (p *Pool) ReleaseCooldown(ctx context.Context, l *Lease, d time.Duration, reason string) error {
	if d <= 0 {
		return fmt.Errorf("%w: cooldown must be positive, got %s", ErrInvalid, d)
	}
	return p.release(ctx, l, "cool", d, reason)
}

// ReleaseDisable ends the lease and disables the credential (a rejected
// key) until Enable.
func (p *Pool) ReleaseDisable(ctx context.Context, l *Lease, reason string) error {
	return p.release(ctx, l, "disable", 0, reason)
}

func (p *Pool) release(ctx context.Context, l *Lease, mode string, d time.Duration, reason string) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrInvalid)
	}
	reply, err := releaseScript.Run(ctx, p.scripts, []string{p.keys.creds},
		l.CredentialID, l.member, mode, d.Microseconds(), reason, p.instance).Result()
	if err != nil {
		return fmt.Errorf("creds: release lease %d on %q: %w", l.Token, l.CredentialID, err)
	}
	n, err := ratelimit.Int64(reply)
	if err != nil {
		return fmt.Errorf("creds: release: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: lease %d on %q (expired or released before)", ErrLeaseLost, l.Token, l.CredentialID)
	}
	// Whatever the mode, our own waiters look again at once (they need not
	// wait for the wake message): one may sleep until this lease's expiry.
	p.wakeHead()
	return nil
}
