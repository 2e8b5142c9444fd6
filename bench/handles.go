package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// handleSet is n pool handles (pkg/creds, in process) on one pool, each
// with its own Redis client, as n worker processes would have: its own
// connections, its own subscription, its own steps.
type handleSet struct {
	pools   []*creds.Pool
	clients []*redis.Client
}

// openHandles opens n handles on the pool called name. Each client keeps
// at most 2 command connections (a handle sends one step at a time) and
// opens one more for its subscription when it first waits.
func (e *env) openHandles(name string, n int, opts ...creds.Option) (*handleSet, error) {
	h := &handleSet{}
	for range n {
		c := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 2, Protocol: 2, DisableIdentity: true})
		h.clients = append(h.clients, c)
		p, err := creds.New(c, name, opts...)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("bench: pool handle %d of %d on %s: %w", len(h.clients), n, name, err)
		}
		h.pools = append(h.pools, p)
	}
	return h, nil
}

// close closes every handle (its last step, its subscription), then the
// clients, 32 at a time.
func (h *handleSet) close() error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, p := range h.pools {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := p.Close(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("handle %d: %w", i, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, c := range h.clients {
		_ = c.Close()
	}
	h.pools, h.clients = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: close pool handles: %w", err)
	}
	return nil
}

// flushAfter empties Redis when a phase that used it ends, also when ctx
// was cancelled.
func (e *env) flushAfter(ctx context.Context) {
	_ = e.rdb.FlushAll(context.WithoutCancel(ctx)).Err()
}
