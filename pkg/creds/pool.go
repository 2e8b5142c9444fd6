package creds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what the pool needs of a Redis client: scripts and pub/sub.
// *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Defaults of a Pool's options.
const (
	// LeaseTTLDefault is how long a lease lives without renewal.
	LeaseTTLDefault = 30 * time.Second
	// WaiterTTLDefault bounds how long a crashed process's waiters can be
	// served: they are dropped from the fleet's queue once their process
	// has not refreshed them for this long. A key granted to a process
	// within that time after it died is a lease like the ones it held,
	// and stays idle until the lease TTL runs out.
	WaiterTTLDefault = 2 * time.Second
	// OpTimeoutDefault bounds each Redis call the pool makes on its own
	// behalf.
	OpTimeoutDefault = 5 * time.Second
	// KeyBaseDefault is the first part of every key.
	KeyBaseDefault = "keyfleet"
)

// Option configures a Pool.
type Option func(*Pool) error

// WithLeaseTTL sets how long a lease lives without renewal (default
// LeaseTTLDefault, at least 10ms). Holders renew well before it runs out.
func WithLeaseTTL(d time.Duration) Option {
	return durationAtLeast("lease TTL", d, 10*time.Millisecond, func(p *Pool) { p.ttl = d })
}

// WithWaiterTTL sets how long this handle's queued waiters stay in the
// fleet's queue without a refresh, and how long a grant an operator's
// action makes to one of them lives until the handle collects it (default
// WaiterTTLDefault, at least 50ms; never more than the lease TTL). The
// handle refreshes them four times per TTL while it waits.
func WithWaiterTTL(d time.Duration) Option {
	return durationAtLeast("waiter TTL", d, 50*time.Millisecond, func(p *Pool) { p.waiterTTL = d })
}

// durationAtLeast is an Option that refuses d (the setting what) when it
// is under least, and otherwise applies set.
func durationAtLeast(what string, d, least time.Duration, set func(*Pool)) Option {
	return func(p *Pool) error {
		if d < least {
			return fmt.Errorf("%w: %s must be at least %s, got %s", ErrInvalid, what, least, d)
		}
		set(p)
		return nil
	}
}

// WithOnly restricts Acquire to the given credential IDs (for a process that
// holds the secrets of only some credentials of the pool).
func WithOnly(ids ...string) Option {
	return func(p *Pool) error {
		for _, id := range ids {
			if err := ValidID(id); err != nil {
				return fmt.Errorf("%w: WithOnly: id %s", ErrInvalid, err)
			}
		}
		p.only = slices.Compact(slices.Sorted(slices.Values(ids)))
		return nil
	}
}

// WithKeyBase sets the first part of every key (default KeyBaseDefault):
// keys are "<base>:{<pool>}:...".
func WithKeyBase(base string) Option {
	return func(p *Pool) error {
		if base == "" || strings.ContainsAny(base, "{}") {
			return fmt.Errorf("%w: key base %q must be non-empty without braces", ErrInvalid, base)
		}
		p.base = base
		return nil
	}
}

// WithScripter sends the pool's steps, admin calls and stats through s
// instead of the client given to New: for example a go-redis
// AutoPipeliner shared with other callers. The client still carries the
// pub/sub subscription and Renew, which must end by its context's
// deadline (an auto-pipelined command may not).
func WithScripter(s redis.Scripter) Option {
	return func(p *Pool) error {
		if s == nil {
			return fmt.Errorf("%w: nil scripter", ErrInvalid)
		}
		p.scripts = s
		return nil
	}
}

// WithOpTimeout bounds each Redis call the pool makes on its own behalf
// (default OpTimeoutDefault): the steps that carry Acquire and Release,
// which must finish even when their caller's context ends so that no
// lease is left behind.
func WithOpTimeout(d time.Duration) Option {
	return func(p *Pool) error {
		if d <= 0 {
			return fmt.Errorf("%w: op timeout must be positive", ErrInvalid)
		}
		p.opTimeout = d
		return nil
	}
}

// Pool is a handle on one credential pool in Redis: what one process uses.
// It is safe for concurrent use; create one per process and pool, and
// Close it when done.
//
// A handle sends its callers' operations (acquire, cancel, release) to
// Redis in steps: one script call at a time, carrying every operation
// asked for while the previous one was on its way. Waiters queue in Redis,
// fleet-wide, in the order they began to wait; the script that frees
// capacity grants it to the longest-waiting waiter that can use it
// directly and sends the lease in one message to that waiter's handle,
// which starts on it without another call.
type Pool struct {
	rdb       Client
	scripts   redis.Scripter // runs the scripts: rdb unless WithScripter
	name      string
	base      string
	keys      keys
	ttl       time.Duration
	waiterTTL time.Duration
	only      []string
	group     string // hash of only, "" for any credential
	opTimeout time.Duration
	instance  string // names this handle in the fleet's queue

	d dispatcher

	subMu sync.Mutex
	sub   *redis.PubSub
	subWG sync.WaitGroup
}

// New returns a handle on the pool called name. It does not touch Redis.
func New(rdb Client, name string, opts ...Option) (*Pool, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("%w: pool name %s", ErrInvalid, err)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	p := &Pool{
		rdb:       rdb,
		name:      name,
		base:      KeyBaseDefault,
		ttl:       LeaseTTLDefault,
		waiterTTL: WaiterTTLDefault,
		opTimeout: OpTimeoutDefault,
		instance:  hex.EncodeToString(nonce[:]),
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	p.waiterTTL = min(p.waiterTTL, p.ttl)
	p.keys = newKeys(p.base, name)
	if p.scripts == nil {
		p.scripts = rdb
	}
	if len(p.only) > 0 {
		p.group = groupName(p.only)
	}
	p.d.init(p)
	return p, nil
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// LeaseTTL is the lifetime of a lease between renewals.
func (p *Pool) LeaseTTL() time.Duration { return p.ttl }

// WaiterTTL is how long this handle's waiters live without a refresh (see
// WithWaiterTTL).
func (p *Pool) WaiterTTL() time.Duration { return p.waiterTTL }

// KeyPrefix is the prefix of every Redis key of the pool (for operators and
// tests; all of them share its hash tag).
func (p *Pool) KeyPrefix() string { return p.keys.prefix }

// Instance names this handle in the fleet's queue of waiters.
func (p *Pool) Instance() string { return p.instance }

// Close makes waiting Acquire calls return ErrClosed, takes this handle's
// waiters out of the fleet's queue and ends its subscription. Leases stay
// valid: release them first. Safe to call twice.
func (p *Pool) Close() error {
	if !p.d.close() {
		return nil
	}
	p.subMu.Lock()
	sub := p.sub
	p.sub = nil
	p.subMu.Unlock()
	var err error
	if sub != nil {
		err = sub.Close()
		p.subWG.Wait()
	}
	return err
}

// subscribe makes sure the handle's channel is heard before its first
// waiter queues, so that no grant after that can go unheard.
func (p *Pool) subscribe(ctx context.Context) error {
	p.subMu.Lock()
	defer p.subMu.Unlock()
	if p.sub != nil {
		return nil
	}
	if p.d.isClosed() {
		return ErrClosed
	}
	ch := p.keys.channel(p.instance)
	sub := p.rdb.Subscribe(ctx, ch)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return fmt.Errorf("creds: subscribe to %s: %w", ch, err)
	}
	p.sub = sub
	msgs := sub.ChannelWithSubscriptions()
	p.subWG.Add(1)
	go func() {
		defer p.subWG.Done()
		for m := range msgs {
			msg, ok := m.(*redis.Message)
			if !ok {
				// A re-subscription after a reconnect: messages may have
				// been missed meanwhile; a step collects what waits.
				p.d.recheck()
				continue
			}
			p.d.message(msg.Payload)
		}
	}()
	return nil
}

// opCtx detaches from the caller's cancellation (a reply in flight must
// not be dropped) but keeps a bound.
func (p *Pool) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.opTimeout)
}
