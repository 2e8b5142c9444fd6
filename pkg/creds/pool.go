package creds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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

// Option configures a Pool.
type Option func(*Pool) error

// WithLeaseTTL sets how long a lease lives without renewal (default 30s,
// at least 10ms). Holders renew well before it runs out.
func WithLeaseTTL(d time.Duration) Option {
	return func(p *Pool) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: lease TTL must be at least 10ms, got %s", ErrInvalid, d)
		}
		p.ttl = d
		return nil
	}
}

// WithOnly restricts Acquire to the given credential IDs (for a process that
// holds the secrets of only some credentials of the pool).
func WithOnly(ids ...string) Option {
	return func(p *Pool) error {
		for _, id := range ids {
			if err := validID(id); err != nil {
				return fmt.Errorf("%w: WithOnly: id %s", ErrInvalid, err)
			}
		}
		p.only = append([]string(nil), ids...)
		return nil
	}
}

// WithKeyBase sets the first part of every key (default "keyfleet"): keys
// are "<base>:{<pool>}:...".
func WithKeyBase(base string) Option {
	return func(p *Pool) error {
		if base == "" || strings.ContainsAny(base, "{}") {
			return fmt.Errorf("%w: key base %q must be non-empty without braces", ErrInvalid, base)
		}
		p.base = base
		return nil
	}
}

// WithScripter sends the pool's scripts through s instead of the client
// given to New: for example a go-redis AutoPipeliner, which batches the
// scripts of concurrent callers into fewer round trips and system calls.
// The client still carries the pub/sub subscription and Renew, which must
// end by its context's deadline (an auto-pipelined command may not).
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
// (default 5s): the attempts inside Acquire, which must finish even when
// Acquire's context ends so that no lease is left behind.
func WithOpTimeout(d time.Duration) Option {
	return func(p *Pool) error {
		if d <= 0 {
			return fmt.Errorf("%w: op timeout must be positive", ErrInvalid)
		}
		p.opTimeout = d
		return nil
	}
}

// Pool is a handle on one credential pool in Redis. It is safe for
// concurrent use; create one per process and pool, and Close it when done.
type Pool struct {
	rdb       Client
	scripts   redis.Scripter // runs the scripts: rdb unless WithScripter
	name      string
	base      string
	keys      keys
	ttl       time.Duration
	only      []string
	opTimeout time.Duration
	instance  string // identifies this handle's wake messages

	mu     sync.Mutex
	queue  []*waiter // FIFO; the head is the only one that asks Redis
	closed bool
	done   chan struct{}

	subMu sync.Mutex
	sub   *redis.PubSub
	subWG sync.WaitGroup
}

type waiter struct{ ch chan struct{} }

// New returns a handle on the pool called name. It does not touch Redis.
func New(rdb Client, name string, opts ...Option) (*Pool, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if name == "" || strings.ContainsAny(name, "{} \t\n") {
		return nil, fmt.Errorf("%w: pool name %q must be non-empty, without braces or spaces", ErrInvalid, name)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	p := &Pool{
		rdb:       rdb,
		name:      name,
		base:      "keyfleet",
		ttl:       30 * time.Second,
		opTimeout: 5 * time.Second,
		instance:  hex.EncodeToString(nonce[:]),
		done:      make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	p.keys = newKeys(p.base, name)
	if p.scripts == nil {
		p.scripts = rdb
	}
	return p, nil
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// LeaseTTL is the lifetime of a lease between renewals.
func (p *Pool) LeaseTTL() time.Duration { return p.ttl }

// KeyPrefix is the prefix of every Redis key of the pool (for operators and
// tests; all of them share its hash tag).
func (p *Pool) KeyPrefix() string { return p.keys.prefix }

// Close ends the pool's subscription and makes waiting Acquire calls return
// ErrClosed. Leases stay valid: release them first. Safe to call twice.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()

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

// subscribe makes sure the wake subscription is live before a waiter's
// first attempt, so that no release after that attempt can go unheard.
func (p *Pool) subscribe(ctx context.Context) error {
	p.subMu.Lock()
	defer p.subMu.Unlock()
	if p.sub != nil {
		return nil
	}
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	sub := p.rdb.Subscribe(ctx, p.keys.wake)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return fmt.Errorf("creds: subscribe to %s: %w", p.keys.wake, err)
	}
	p.sub = sub
	ch := sub.ChannelWithSubscriptions()
	p.subWG.Add(1)
	go func() {
		defer p.subWG.Done()
		for m := range ch {
			// A wake from another process, or a re-subscription after a
			// reconnect (releases may have gone unheard meanwhile): either
			// way the head waiter looks again.
			if msg, ok := m.(*redis.Message); ok && msg.Payload == p.instance {
				continue // our own release already woke our head
			}
			p.wakeHead()
		}
	}()
	return nil
}

// wakeHead tells the head waiter to look again.
func (p *Pool) wakeHead() {
	p.mu.Lock()
	if len(p.queue) > 0 {
		select {
		case p.queue[0].ch <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

func (p *Pool) queued() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0
}

func (p *Pool) join() (*waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	w := &waiter{ch: make(chan struct{}, 1)}
	p.queue = append(p.queue, w)
	return w, nil
}

func (p *Pool) isHead(w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0 && p.queue[0] == w
}

// leave removes w and hands the turn to the next waiter: after a success
// there may be room for more, and after a cancel w may have swallowed a wake.
func (p *Pool) leave(w *waiter) {
	p.mu.Lock()
	for i, x := range p.queue {
		if x == w {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			break
		}
	}
	if len(p.queue) > 0 {
		select {
		case p.queue[0].ch <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// opCtx detaches from the caller's cancellation (a reply in flight must
// not be dropped) but keeps a bound.
func (p *Pool) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.opTimeout)
}
