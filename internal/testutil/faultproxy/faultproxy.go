// Package faultproxy is a TCP proxy for tests that puts network faults
// between a client and one server: added latency, connection resets and
// partitions.
//
// A Proxy listens on a free loopback port and forwards every connection to
// its target. Its knobs act at once on every connection, open or new:
//
//   - SetLatency delays each chunk of data, in each direction, by a base
//     plus a random jitter (order is kept: a chunk never overtakes the one
//     before it);
//   - ResetAll aborts every open connection with a TCP reset on both sides;
//   - Partition stops all forwarding, like a cable pulled out: data already
//     sent waits (as TCP would keep retransmitting it), nothing is lost or
//     answered, and new connections are accepted but get no answer. Heal
//     lets everything flow again, in order, as a healed network does.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chunkSize is the most one read forwards at once; queued is how many
// chunks may wait in one direction (for latency or a partition) before the
// proxy stops reading and the sender feels back-pressure.
const (
	chunkSize = 32 << 10
	queued    = 16
)

// Proxy forwards TCP connections from a loopback port to a target.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup
	// targeted is closed once the target is known (at once, but for a
	// proxy made with NewPending).
	targeted chan struct{}

	accepted atomic.Int64
	resets   atomic.Int64

	mu          sync.Mutex
	target      string
	latency     time.Duration
	jitter      time.Duration
	partitioned bool
	healed      chan struct{} // closed while not partitioned
	links       map[*link]struct{}
	closed      bool
}

// New starts a proxy to target ("host:port") on a free loopback port.
func New(target string) (*Proxy, error) {
	p, err := NewPending()
	if err != nil {
		return nil, err
	}
	if err := p.SetTarget(target); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// NewPending starts a proxy on a free loopback port whose target is not
// known yet: it accepts connections and holds them, unanswered, until
// SetTarget. A server that picks its own free port can be proxied this
// way: a port chosen for it beforehand might be taken before it binds it.
func NewPending() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{ln: ln, targeted: make(chan struct{}), healed: healed, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetTarget sets the target ("host:port") of a proxy made with NewPending;
// the connections it holds go through. A target is set once.
func (p *Proxy) SetTarget(target string) error {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.target != "" {
		return fmt.Errorf("faultproxy: target %s already set (to %s)", target, p.target)
	}
	p.target = target
	close(p.targeted)
	return nil
}

// Start starts a proxy to target for a test and closes it in t.Cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// StartPending starts a proxy with NewPending for a test and closes it in
// t.Cleanup.
func StartPending(t testing.TB) *Proxy {
	t.Helper()
	p, err := NewPending()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the proxy's "127.0.0.1:port"; clients dial it instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to ("" while pending).
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetLatency delays every chunk forwarded from now on, in each direction,
// by base plus a random duration in [0, jitter]. Zero for both: none (the
// default).
func (p *Proxy) SetLatency(base, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = max(base, 0), max(jitter, 0)
	p.mu.Unlock()
}

// ResetAll aborts every open connection (and any held by a partition) with
// a TCP reset towards both the client and the server, and reports how many
// it reset. New connections are forwarded as before.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
	p.resets.Add(int64(len(links)))
	return len(links)
}

// Partition stops forwarding until Heal: open connections stall with their
// data kept in order, new ones are accepted and left unanswered. Calling it
// while partitioned does nothing.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
	}
}

// Heal ends a partition: stalled data flows again and the connections held
// meanwhile reach the target. Calling it while not partitioned does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// Partitioned reports whether a partition is on.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitioned
}

// Stats counts connections: accepted since the start, open now, and reset
// by ResetAll.
type Stats struct {
	Accepted, Open, Reset int
}

// Stats returns the connection counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.links)
	p.mu.Unlock()
	return Stats{Accepted: int(p.accepted.Load()), Open: open, Reset: int(p.resets.Load())}
}

// Close stops listening, resets every connection and waits until all the
// proxy's goroutines are gone. Safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close(true)
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve connects one client to the target and forwards both ways until
// both directions have ended or the link is reset.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	// A pending target or a partition leaves a new connection unanswered:
	// the target is dialled only once it is known and reachable.
	select {
	case <-p.targeted:
	case <-l.done:
		return
	}
	if !p.waitHealed(l.done) {
		return
	}
	s, err := net.DialTimeout("tcp", p.Target(), 5*time.Second)
	if err != nil {
		l.close(true) // the target is down: the client sees a reset, as with no proxy
		return
	}
	if !l.setServer(s) {
		return // reset meanwhile
	}
	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); p.pipe(l, s, l.client) }()
	go func() { defer dirs.Done(); p.pipe(l, l.client, s) }()
	dirs.Wait()
	l.close(false)
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst: a reader queues chunks stamped with their due
// time, the writer sends each when it is due and no partition is on. At
// the source's end of stream the destination's write side is closed.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	chunks := make(chan chunk, queued)
	var readErr error
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(chunks)
		var last time.Time
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(p.delay())
				if due.Before(last) {
					due = last // never overtake the chunk before
				}
				last = due
				select {
				case chunks <- chunk{data: buf[:n], due: due}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	ok := true
	for c := range chunks {
		if !ok {
			continue // drain after a failed write
		}
		if d := time.Until(c.due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				ok = false
				continue
			}
		}
		if !p.waitHealed(l.done) {
			ok = false
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			ok = false
			l.close(true)
		}
	}
	<-readerDone
	if ok && errors.Is(readErr, io.EOF) {
		if tc, isTCP := dst.(*net.TCPConn); isTCP {
			_ = tc.CloseWrite() // pass the end of stream on
			return
		}
	}
	l.close(!ok || !errors.Is(readErr, io.EOF))
}

// delay is the latency for the next chunk.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	base, jitter := p.latency, p.jitter
	p.mu.Unlock()
	if jitter > 0 {
		base += rand.N(jitter + 1)
	}
	return base
}

// waitHealed waits until no partition is on; false if done closed first.
func (p *Proxy) waitHealed(done <-chan struct{}) bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		select {
		case <-done:
			return false
		default:
			return true
		}
	case <-done:
		return false
	}
}

// link is one proxied connection: the client's side and, once dialled, the
// target's.
type link struct {
	client net.Conn
	done   chan struct{} // closed when the link is closed or reset

	mu     sync.Mutex
	server net.Conn
	closed bool
}

func (l *link) setServer(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = s.Close()
		return false
	}
	l.server = s
	return true
}

// close closes both sides; with reset, each side gets a TCP RST instead of
// an orderly end of stream.
func (l *link) close(reset bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := []net.Conn{l.client, l.server}
	l.mu.Unlock()
	close(l.done)
	for _, c := range conns {
		if c == nil {
			continue
		}
		if tc, isTCP := c.(*net.TCPConn); isTCP && reset {
			_ = tc.SetLinger(0) // close sends RST
		}
		_ = c.Close()
	}
}
