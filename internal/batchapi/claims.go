package batchapi

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed claims.lua
var claimsLua string

var claimsScript = redis.NewScript(claimsLua)

// claims are the runner's Redis claims: each names one piece of work that
// one worker of the fleet does at a time, for a TTL. Every key is built
// here, all under one hash tag:
//
//	keyfleet:{<stream>.batchapi}:stage:<batch>    staging a batch's items into records
//	keyfleet:{<stream>.batchapi}:rec:<record>     a step of a provider batch record (and, held
//	                                              for the poll interval, when it is next polled)
//	keyfleet:{<stream>.batchapi}:key:<credential> creating a provider batch on a key
//
// and, beside the pool's spend ledger (in its hash tag, so that a settle
// and its mark go in one transaction), what a record reserved and settled
// (spend.go):
//
//	keyfleet:{<pool>}:batchapi:spend:<record>
//
// A claim is mutual exclusion in the ordinary run of things; what must
// never happen twice (creating a provider batch, recording a result) is
// also guarded by the record's compare and set and by the provider's own
// answers (docs/batch-api.md).
type claims struct {
	rdb    redis.UniversalClient
	prefix string
	owner  string
}

func newClaims(rdb redis.UniversalClient, stream, owner string) *claims {
	return &claims{rdb: rdb, prefix: "keyfleet:{" + stream + ".batchapi}:", owner: owner}
}

func (c *claims) stageKey(batch string) string { return c.prefix + "stage:" + batch }
func (c *claims) recKey(id string) string      { return c.prefix + "rec:" + id }
func (c *claims) keyKey(cred string) string    { return c.prefix + "key:" + cred }

// spendKey is record's spend hash in pool.
func spendKey(pool, record string) string { return "keyfleet:{" + pool + "}:batchapi:spend:" + record }

// take claims key for ttl; false while a claim lives, the owner's own
// too (a record's claim held on after a poll is the time until its next
// poll, for the whole fleet).
func (c *claims) take(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	ok, err := c.rdb.SetNX(ctx, key, c.owner, max(ttl, time.Millisecond)).Result()
	if err != nil {
		return false, fmt.Errorf("batchapi: claim %s: %w", key, err)
	}
	return ok, nil
}

// extend keeps the owner's claim for ttl from now; false when it is not
// the owner's any more.
func (c *claims) extend(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	n, err := claimsScript.Run(ctx, c.rdb, []string{key}, "extend", c.owner, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("batchapi: extend claim %s: %w", key, err)
	}
	return n == 1, nil
}

// release gives the owner's claim up (nothing when it is not the
// owner's).
func (c *claims) release(ctx context.Context, key string) {
	_ = claimsScript.Run(ctx, c.rdb, []string{key}, "release", c.owner).Err()
}

// keep extends the owner's claim on key every ttl/3 until stop is
// called: a long step (staging a large batch, recording 100,000 results)
// keeps its claim, and a worker that dies loses it within ttl.
func (c *claims) keep(ctx context.Context, key string, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(ttl/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, err := c.extend(ctx, key, ttl); err == nil && !ok {
					return // lost: the record's compare and set guards what follows
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
