package creds

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

//go:embed lua/probe.lua
var probeLua string

// probeScript stands alone: it touches one key, none of the pool's state.
var probeScript = redis.NewScript(probeLua)

// ClaimProbe claims the probe of credential id for ttl, fleet-wide: within
// ttl of a successful claim every other claim fails, so that a fleet of
// workers probes a disabled credential once per interval, not once per
// worker. owner names the claimant (a worker ID) in the claim's key. The
// claim is not released: it lapses, which spaces the probes.
func (p *Pool) ClaimProbe(ctx context.Context, id, owner string, ttl time.Duration) (bool, error) {
	if err := ValidID(id); err != nil {
		return false, fmt.Errorf("%w: credential id %s", ErrInvalid, err)
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: probe claim must last at least 1ms, got %s", ErrInvalid, ttl)
	}
	reply, err := probeScript.Run(ctx, p.scripts, []string{p.keys.probe(id)}, owner, ttl.Milliseconds()).Result()
	if err != nil {
		return false, fmt.Errorf("creds: claim the probe of %q in pool %q: %w", id, p.name, err)
	}
	n, err := ratelimit.Int64(reply)
	if err != nil {
		return false, fmt.Errorf("creds: claim the probe of %q: %w", id, err)
	}
	return n == 1, nil
}
