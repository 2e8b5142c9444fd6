package creds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Acquire leases the least recently used usable credential, waiting until
// one is usable or ctx ends. owner names the holder (a worker and slot) in
// stats.
//
// Waiting is event-driven: a release anywhere wakes the waiters, and a
// cooldown, lease expiry or rate window that ends wakes them at that moment.
// When ctx ends, Acquire returns an error matching ErrCanceled and ctx's
// error, and holds nothing: a lease granted while the context ended is
// released before returning.
//
// Errors: ErrPoolEmpty when the pool has no (usable by this handle)
// credential at all, ErrClosed, ErrCanceled, or a Redis error.
func (p *Pool) Acquire(ctx context.Context, owner string) (*Lease, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	start := time.Now()
	if ctx.Err() != nil {
		return nil, canceled(ctx, start)
	}
	if !p.queued() {
		l, _, err := p.try(ctx, owner)
		if l != nil || !errors.Is(err, ErrNoneAvailable) {
			return l, err
		}
	}
	if err := p.subscribe(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, canceled(ctx, start)
		}
		return nil, err
	}
	w, err := p.join()
	if err != nil {
		return nil, err
	}
	defer p.leave(w)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if p.isHead(w) {
			l, wait, err := p.try(ctx, owner)
			if l != nil || !errors.Is(err, ErrNoneAvailable) {
				return l, err
			}
			timer.Stop()
			if wait >= 0 {
				timer.Reset(wait)
			}
		}
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
			return nil, canceled(ctx, start)
		case <-p.done:
			return nil, ErrClosed
		}
	}
}

// TryAcquire leases a usable credential without waiting. When none is
// usable it returns an *UnavailableError (matching ErrNoneAvailable) that
// says when the next cooldown, lease or rate window ends.
func (p *Pool) TryAcquire(ctx context.Context, owner string) (*Lease, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	l, wait, err := p.try(ctx, owner)
	if errors.Is(err, ErrNoneAvailable) {
		return nil, &UnavailableError{RetryAfter: wait}
	}
	return l, err
}

func canceled(ctx context.Context, start time.Time) error {
	return fmt.Errorf("%w after %s: %w", ErrCanceled, time.Since(start).Round(time.Millisecond), context.Cause(ctx))
}

// try runs the acquire script once. It returns a lease, or ErrNoneAvailable
// with the time until the soonest timed event (-1 for none).
func (p *Pool) try(ctx context.Context, owner string) (*Lease, time.Duration, error) {
	args := make([]any, 0, 2+len(p.only))
	args = append(args, owner, p.ttl.Microseconds())
	for _, id := range p.only {
		args = append(args, id)
	}
	opCtx, cancel := p.opCtx(ctx)
	sent := time.Now()
	reply, err := acquireScript.Run(opCtx, p.scripts, []string{p.keys.creds, p.keys.fence}, args...).Result()
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("creds: acquire from pool %q: %w", p.name, err)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return nil, 0, fmt.Errorf("creds: acquire: unexpected reply %T", reply)
	}
	status, err := ratelimit.Int64(arr[0])
	if err != nil {
		return nil, 0, fmt.Errorf("creds: acquire: status: %w", err)
	}
	switch status {
	case 1:
		l, err := p.decodeLease(arr, owner)
		if err != nil {
			return nil, 0, err
		}
		l.RequestedAt = sent
		if ctx.Err() != nil {
			// The caller gave up while the grant was in flight: hand it back.
			rctx, cancel := p.opCtx(ctx)
			_ = p.Release(rctx, l)
			cancel()
			return nil, 0, canceled(ctx, time.Now())
		}
		return l, 0, nil
	case 0:
		v, err := ratelimit.Int64s(arr, 3)
		if err != nil {
			return nil, 0, fmt.Errorf("creds: acquire: %w", err)
		}
		wait := time.Duration(-1)
		if v[1] >= 0 {
			wait = max(time.Duration(v[1]-v[2])*time.Microsecond, 0)
		}
		return nil, wait, ErrNoneAvailable
	case -1:
		if len(p.only) > 0 {
			return nil, 0, fmt.Errorf("%w: none of %q is registered in pool %q", ErrPoolEmpty, p.only, p.name)
		}
		return nil, 0, fmt.Errorf("%w: pool %q", ErrPoolEmpty, p.name)
	default:
		return nil, 0, fmt.Errorf("creds: acquire: unexpected status %d", status)
	}
}

func (p *Pool) decodeLease(arr []any, owner string) (*Lease, error) {
	if len(arr) != 5 {
		return nil, fmt.Errorf("creds: acquire: reply has %d elements, want 5", len(arr))
	}
	id, ok := arr[1].(string)
	if !ok {
		return nil, fmt.Errorf("creds: acquire: credential id is %T", arr[1])
	}
	token, ok := arr[2].(string)
	if !ok {
		return nil, fmt.Errorf("creds: acquire: token is %T", arr[2])
	}
	tok, err := ratelimit.Int64(token)
	if err != nil {
		return nil, fmt.Errorf("creds: acquire: token: %w", err)
	}
	exp, err := ratelimit.Int64(arr[3])
	if err != nil {
		return nil, fmt.Errorf("creds: acquire: expiry: %w", err)
	}
	now, err := ratelimit.Int64(arr[4])
	if err != nil {
		return nil, fmt.Errorf("creds: acquire: time: %w", err)
	}
	return &Lease{
		CredentialID: id,
		Token:        uint64(tok),
		Owner:        owner,
		Acquired:     time.UnixMicro(now),
		Expires:      time.UnixMicro(exp),
		member:       token + "|" + owner,
	}, nil
}
