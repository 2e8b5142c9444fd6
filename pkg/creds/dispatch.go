package creds

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// dispatcher sends a handle's operations to Redis in steps (lua/step.lua),
// one step at a time: operations asked for while a step is on its way go
// together in the next one. It also runs the steps nobody asks for: one
// when a grant message cannot give its lease to its waiter by itself (see
// deliver) or the handle's timer duty comes, and one every
// quarter of the waiter TTL while the handle has waiters queued (which
// keeps them alive in the fleet's queue).
type dispatcher struct {
	p *Pool

	mu      sync.Mutex
	ops     []*op              // for the next step
	waiters map[string]*waiter // by wid: queued in Redis, or about to be
	seq     uint64
	timerAt time.Time // the handle's timer duty (zero: none)
	join    bool      // record the handle's group before the next step
	// joins are the key sets to record before the next step; joinedSets
	// those recorded (once per set and handle, again after Redis lost them).
	joins      []*KeySet
	joinedSets map[string]bool
	claim      bool // grants may wait for this handle in Redis
	// clock pairs this process's clock with Redis's (see localTime);
	// delivered holds the grants taken from their messages whose records
	// in Redis a step has not collected yet (see deliver).
	clock     clockPair
	delivered map[string]time.Time
	closed    bool
	started   bool

	kickCh   chan struct{}
	done     chan struct{}
	loopDone chan struct{}
}

// op is one operation of a step.
type op struct {
	args []any      // opcode and arguments, as lua/step.lua reads them
	w    *waiter    // E and X: the waiter
	res  chan error // R: the outcome, if somebody waits for it
}

// waiter is one Acquire call waiting for a grant.
type waiter struct {
	wid    string
	member string // its entry in the fleet's queue
	cost   int64
	owner  string
	prio   int
	scope  string
	keys   *KeySet // nil: the handle's group
	try    bool
	queued bool // Redis said it is in the queue
	// onQueued is Request.Queued, called once when a step left the
	// waiter queued without a grant (told: it was).
	onQueued func()
	told     bool
	sent     bool // its E op went out in a step
	joined   bool // its handle's group was recorded again for it once
	res      chan waitResult
}

type waitResult struct {
	lease *Lease
	err   error
}

func (d *dispatcher) init(p *Pool) {
	d.p = p
	d.waiters = make(map[string]*waiter)
	d.delivered = make(map[string]time.Time)
	d.join = p.group != ""
	d.joinedSets = map[string]bool{}
	d.kickCh = make(chan struct{}, 1)
	d.done = make(chan struct{})
	d.loopDone = make(chan struct{})
}

func (d *dispatcher) kick() {
	select {
	case d.kickCh <- struct{}{}:
	default:
	}
}

// recheck asks the next step to collect whatever waits for this handle in
// Redis (after a grant message, or a re-subscription that may have missed
// some).
func (d *dispatcher) recheck() {
	d.mu.Lock()
	d.claim = true
	d.mu.Unlock()
	d.kick()
}

func (d *dispatcher) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// message handles what another handle's script sent on this handle's
// channel: "g<grants>" (leases for its waiters: deliverAll), "g"
// (grants or answers wait in Redis: a step collects them) or "t<us>" (run
// a step then).
func (d *dispatcher) message(payload string) {
	if us, ok := cutPrefix(payload, "t"); ok {
		n, err := strconv.ParseInt(us, 10, 64)
		if err == nil {
			d.mu.Lock()
			at := time.Now().Add(time.Duration(n) * time.Microsecond)
			if d.timerAt.IsZero() || at.Before(d.timerAt) {
				d.timerAt = at
			}
			d.mu.Unlock()
		}
		d.kick() // the loop sets its timer; it steps only when the time comes
		return
	}
	if gs, ok := cutPrefix(payload, "g"); ok && gs != "" && d.deliverAll(gs) {
		return
	}
	d.recheck()
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// newWaiter registers a waiter and queues its E op.
func (d *dispatcher) newWaiter(r Request, try bool) (*waiter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	d.seq++
	wid := d.p.instance + "." + strconv.FormatUint(d.seq, 36)
	w := &waiter{wid: wid, cost: r.Cost, owner: r.Owner, prio: r.Priority, scope: r.Scope, keys: r.Keys, try: try,
		onQueued: r.Queued, res: make(chan waitResult, 1)}
	class := d.p.group
	if r.Keys != nil {
		class = r.Keys.name
		if !d.joinedSets[class] {
			d.joinedSets[class] = true
			d.joins = append(d.joins, r.Keys)
		}
	}
	if r.Scope != "" {
		class += "=" + r.Scope
	}
	w.member = wid + "|" + strconv.FormatInt(r.Cost, 10) + "|" + class + "|" + r.Owner
	d.waiters[wid] = w
	d.pushE(w)
	d.startLocked()
	return w, nil
}

func (d *dispatcher) pushE(w *waiter) {
	try := "0"
	if w.try {
		try = "1"
	}
	w.queued, w.sent = false, false
	group := d.p.group
	if w.keys != nil {
		group = w.keys.name
	}
	d.ops = append(d.ops, &op{args: []any{"E", w.wid, w.cost, w.owner, try, w.prio, w.scope, group}, w: w})
	d.kick()
}

// cancel takes w out: it reports false when w already has its result.
func (d *dispatcher) cancel(w *waiter) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.waiters[w.wid] != w {
		return false
	}
	delete(d.waiters, w.wid)
	d.dropE(w)
	return true
}

// dropE removes w's E op if it has not gone out yet, else queues an X op
// (leave the queue, or hand back an unclaimed grant).
func (d *dispatcher) dropE(w *waiter) {
	if !w.sent {
		for i, o := range d.ops {
			if o.w == w {
				d.ops = append(d.ops[:i], d.ops[i+1:]...)
				return
			}
		}
	}
	d.ops = append(d.ops, &op{args: []any{"X", w.wid, w.member}})
	d.kick()
}

// release queues an R op; the returned channel gets its outcome. sent is
// when the run's request left, µs on Redis's clock (0: unknown).
func (d *dispatcher) release(l *Lease, real int64, mode string, dur time.Duration, text, sig string, sent int64) chan error {
	res := make(chan error, 1)
	d.mu.Lock()
	d.ops = append(d.ops, &op{args: releaseArgs(l, real, mode, dur, text, sig, sent), res: res})
	if d.closed {
		// No loop runs any more: send it now.
		d.mu.Unlock()
		d.step()
		return res
	}
	d.startLocked()
	d.kick()
	d.mu.Unlock()
	return res
}

func releaseArgs(l *Lease, real int64, mode string, dur time.Duration, text, sig string, sent int64) []any {
	return []any{"R", l.CredentialID, l.member, l.Cost, real, mode, dur.Microseconds(), text, l.Acquired.UnixMicro(), sig, sent, l.Scope}
}

func (d *dispatcher) startLocked() {
	if !d.started && !d.closed {
		d.started = true
		go d.loop()
	}
}

// close fails every waiter with ErrClosed, sends what is left (their
// cancels, pending releases) in a last step and stops the loop. It reports
// false when already closed.
func (d *dispatcher) close() bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.closed = true
	for wid, w := range d.waiters {
		delete(d.waiters, wid)
		d.dropE(w)
		w.res <- waitResult{err: ErrClosed}
	}
	started := d.started
	d.mu.Unlock()
	close(d.done)
	if started {
		<-d.loopDone
	}
	return true
}

func (d *dispatcher) loop() {
	defer close(d.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	keepEvery := d.p.waiterTTL / 4
	lastAlive := time.Now()
	for {
		d.mu.Lock()
		wake := time.Hour
		if !d.timerAt.IsZero() {
			wake = min(wake, time.Until(d.timerAt))
		}
		if len(d.waiters) > 0 {
			wake = min(wake, time.Until(lastAlive.Add(keepEvery)))
		}
		d.mu.Unlock()
		timer.Reset(max(wake, 0))
		select {
		case <-d.done:
			d.flush()
			return
		case <-d.kickCh:
		case <-timer.C:
		}
		timer.Stop()
		d.mu.Lock()
		due := !d.timerAt.IsZero() && !time.Now().Before(d.timerAt)
		if due {
			d.timerAt = time.Time{}
		}
		work := len(d.ops) > 0 || d.claim || d.join || due
		keep := len(d.waiters) > 0 && time.Since(lastAlive) >= keepEvery
		d.mu.Unlock()
		switch {
		case work:
			// Ops to send, grants to claim, or the timer duty: a step. It
			// keeps the handle's waiters alive too.
			lastAlive = time.Now()
			d.step()
		case keep:
			lastAlive = time.Now()
			d.keepAlive()
		}
	}
}

// keepAlive refreshes this handle's waiters in the fleet's queue with the
// small alive script, and steps if some were lost or grants wait.
func (d *dispatcher) keepAlive() {
	p := d.p
	ctx, cancel := p.opCtx(context.Background())
	defer cancel()
	sent := time.Now()
	reply, err := aliveScript.Run(ctx, p.scripts, []string{p.keys.creds}, p.instance, p.waiterTTL.Microseconds()).Result()
	if err != nil {
		return // the next keep-alive or step tries again
	}
	v, err := ratelimit.Int64s(reply, 4)
	if err != nil {
		return
	}
	d.mu.Lock()
	d.clock = clockPair{sent: sent, redisUS: v[3]}
	queued := 0
	for _, w := range d.waiters {
		if w.queued {
			queued++
		}
	}
	lost := int(v[0]) < queued
	if v[1] > 0 {
		d.claim = true
	}
	d.mu.Unlock()
	if lost || v[1] > 0 || v[2] == 1 {
		// A step re-queues lost waiters, claims the grants, and runs the
		// pool's timed step when its owner missed it.
		d.step()
	}
}

// flush sends the ops left at close in one last step, which also
// collects the records of the grants its messages delivered.
func (d *dispatcher) flush() {
	d.mu.Lock()
	n := len(d.ops)
	collect := d.claim // grants delivered by their messages leave records
	d.mu.Unlock()
	if n > 0 || collect {
		d.step()
	}
}

// step sends the pending ops in one script call and hands out the results.
func (d *dispatcher) step() {
	p := d.p
	d.mu.Lock()
	ops := d.ops
	d.ops = nil
	join := d.join
	hasE := false
	for _, o := range ops {
		if o.w != nil && o.args[0] == "E" {
			o.w.sent = true
			hasE = true
		}
	}
	flags := ""
	queued := false
	for _, w := range d.waiters {
		if w.queued {
			queued = true
			break
		}
	}
	alive := int64(0) // a waiter this step queues keeps the handle alive itself
	if queued {
		alive = p.waiterTTL.Microseconds()
	}
	if d.claim || queued {
		// A grant message came, or waiters wait (a message may be lost):
		// collect the grants waiting in Redis.
		flags += "c"
		d.claim = false
	}
	if queued {
		flags += "q"
	}
	d.mu.Unlock()

	ctx, cancel := p.opCtx(context.Background())
	defer cancel()
	if hasE {
		if err := p.subscribe(ctx); err != nil {
			d.fail(ops, err)
			return
		}
	}
	if join {
		if err := p.joinGroup(ctx, p.group, p.only); err != nil {
			d.fail(ops, err)
			return
		}
		d.mu.Lock()
		d.join = false
		d.mu.Unlock()
	}
	d.mu.Lock()
	joins := d.joins
	d.joins = nil
	d.mu.Unlock()
	for i, k := range joins {
		if err := p.joinGroup(ctx, k.name, k.ids); err != nil {
			d.mu.Lock()
			for _, k := range joins[i:] {
				delete(d.joinedSets, k.name) // recorded again with the next acquire
			}
			d.mu.Unlock()
			d.fail(ops, err)
			return
		}
	}
	args := make([]any, 0, 6+10*len(ops))
	args = append(args, p.instance, p.ttl.Microseconds(), p.waiterTTL.Microseconds(), alive, p.group, flags)
	for _, o := range ops {
		args = append(args, o.args...)
	}
	sent := time.Now()
	reply, err := stepScript.Run(ctx, p.scripts, []string{p.keys.creds}, args...).Result()
	if err != nil {
		d.fail(ops, fmt.Errorf("creds: pool %q: %w", p.name, err))
		return
	}
	r, err := decodeStep(reply, len(ops))
	if err != nil {
		d.fail(ops, fmt.Errorf("creds: pool %q: step: %w", p.name, err))
		return
	}
	d.apply(ops, r, sent)
}

// fail hands err to every op of a step that did not come back. A waiter
// whose E op may have reached Redis is taken out again (best effort).
func (d *dispatcher) fail(ops []*op, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range ops {
		switch {
		case o.res != nil:
			o.res <- err
		case o.w != nil && o.args[0] == "E":
			if d.waiters[o.w.wid] == o.w {
				delete(d.waiters, o.w.wid)
				o.w.res <- waitResult{err: err}
			}
			d.ops = append(d.ops, &op{args: []any{"X", o.w.wid, o.w.member}})
		}
	}
}

func (d *dispatcher) apply(ops []*op, r stepReply, sent time.Time) {
	p := d.p
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clock = clockPair{sent: sent, redisUS: r.now.UnixMicro()}
	var newlyQueued []*waiter
	for i, o := range ops {
		res := r.results[i]
		switch o.args[0] {
		case "E":
			w := o.w
			if d.waiters[w.wid] != w {
				continue // cancelled meanwhile; its X op follows
			}
			switch res.code {
			case 0:
				w.queued = true
				if w.onQueued != nil && !w.told {
					newlyQueued = append(newlyQueued, w)
				}
			case 1:
				// a try that was served: its grant is among the grants
			case -1:
				if (w.keys != nil || p.group != "") && !w.joined {
					// The group may be gone with Redis's state: record it
					// again and ask once more.
					w.joined = true
					if w.keys != nil {
						d.joins = append(d.joins, w.keys)
					} else {
						d.join = true
					}
					d.pushE(w)
					continue
				}
				delete(d.waiters, w.wid)
				w.res <- waitResult{err: d.emptyErr(w)}
			case -2:
				delete(d.waiters, w.wid)
				w.res <- waitResult{err: w.costError(res.n, res.text, res.text2)}
			case -3:
				delete(d.waiters, w.wid)
				wait := time.Duration(-1)
				if res.n >= 0 {
					wait = time.Duration(res.n) * time.Microsecond
				}
				w.res <- waitResult{err: &UnavailableError{RetryAfter: wait}}
			}
		case "R":
			if o.res != nil {
				if res.code == 1 {
					o.res <- nil
				} else {
					o.res <- fmt.Errorf("%w (expired or released before)", ErrLeaseLost)
				}
			}
		}
	}
	for _, g := range r.grants {
		if _, ok := d.delivered[g.wid]; ok {
			// Its message gave it to its waiter already: this was the
			// record that step collected.
			delete(d.delivered, g.wid)
			continue
		}
		w := d.waiters[g.wid]
		if g.lost {
			if w != nil {
				d.pushE(w) // its grant ran out unclaimed: wait again
			}
			continue
		}
		if g.neverFits != nil {
			// It waited; the credentials that take its cost were disabled
			// (or their limits changed) meanwhile: it left the queue.
			if w != nil {
				delete(d.waiters, g.wid)
				w.res <- waitResult{err: w.costError(g.neverFits.max, g.neverFits.by, g.neverFits.disabled)}
			}
			continue
		}
		l := &Lease{
			CredentialID: g.id, Token: g.token, Cost: g.cost, Acquired: g.at,
			Expires: g.expires, RequestedAt: sent, member: g.member(),
		}
		if w == nil {
			// Its waiter gave up meanwhile: hand the lease on at once.
			d.ops = append(d.ops, &op{args: releaseArgs(l, -1, "ok", 0, "", "", 0)})
			d.kick()
			continue
		}
		delete(d.waiters, g.wid)
		l.Owner, l.Scope = w.owner, w.scope
		w.res <- waitResult{lease: l}
	}
	for _, w := range newlyQueued {
		if d.waiters[w.wid] == w { // not granted in this step: it waits
			w.told = true
			w.onQueued()
		}
	}
	if r.timer >= 0 {
		d.timerAt = time.Now().Add(r.timer)
	}
	queued := 0
	for _, w := range d.waiters {
		if w.queued {
			queued++
		}
	}
	if r.queued >= 0 && r.queued < queued {
		// Some of this handle's waiters left the fleet's queue without a
		// grant (they went unrefreshed too long, or Redis lost its state):
		// queue them again, at the back.
		for _, w := range d.waiters {
			if w.queued {
				d.ops = append(d.ops, &op{args: []any{"X", w.wid, w.member}})
				d.pushE(w)
			}
		}
	}
}

// costError is w's CostError from the script's figures: the largest
// cost, "<id> <encoded limit>" that sets it, and the disabled credential
// that would take w's cost ("" none).
func (w *waiter) costError(largest int64, by, disabled string) *CostError {
	return &CostError{Cost: w.cost, Max: largest, Limits: readableLimit(by), Disabled: disabled}
}

// readableLimit turns "<id> <encoded limit>" into "<id> cost=N/P".
func readableLimit(s string) string {
	// "<id> <limit>", or "account <id> <limit>" for an account's limit.
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return s
	}
	id, enc := s[:i], s[i+1:]
	if ls := decodeLimits(enc); len(ls) == 1 {
		return id + " " + ls[0].String()
	}
	return s
}

func (d *dispatcher) emptyErr(w *waiter) error {
	p := d.p
	if w.keys != nil {
		return fmt.Errorf("%w: none of %q is registered in pool %q", ErrPoolEmpty, w.keys.ids, p.name)
	}
	if len(p.only) > 0 {
		return fmt.Errorf("%w: none of %q is registered in pool %q", ErrPoolEmpty, p.only, p.name)
	}
	return fmt.Errorf("%w: pool %q", ErrPoolEmpty, p.name)
}

// stepReply is a decoded reply of lua/step.lua.
type stepReply struct {
	now     time.Time
	results []opResult
	grants  []grant
	timer   time.Duration // -1: none
	queued  int           // this handle's waiters in the fleet's queue (-1: not counted)
}

type opResult struct {
	code  int64
	n     int64
	text  string
	text2 string
}

type grant struct {
	wid, id string
	token   uint64
	expires time.Time
	cost    int64
	owner   string
	at      time.Time // when it was granted (Redis's clock)
	lost    bool
	// neverFits: no grant; the waiter's cost fits no usable credential.
	neverFits *neverFits
}

// neverFits is the script's answer to a queued waiter whose cost no
// usable credential takes any more (see CostError).
type neverFits struct {
	max          int64
	by, disabled string
}

func (g grant) member() string { return strconv.FormatUint(g.token, 10) + "|" + g.owner }

func decodeStep(reply any, nops int) (stepReply, error) {
	var r stepReply
	arr, ok := reply.([]any)
	if !ok || len(arr) != 5 {
		return r, fmt.Errorf("unexpected reply %T", reply)
	}
	now, err := ratelimit.Int64(arr[0])
	if err != nil {
		return r, fmt.Errorf("time: %w", err)
	}
	r.now = time.UnixMicro(now)
	results, ok := arr[1].([]any)
	if !ok || len(results) != nops {
		return r, fmt.Errorf("results: want %d, got %T", nops, arr[1])
	}
	for i, e := range results {
		v, ok := e.([]any)
		if !ok || len(v) == 0 || len(v) > 4 {
			return r, fmt.Errorf("result %d: unexpected shape %T", i, e)
		}
		var res opResult
		if res.code, err = ratelimit.Int64(v[0]); err != nil {
			return r, fmt.Errorf("result %d: %w", i, err)
		}
		if len(v) >= 2 {
			if res.n, err = ratelimit.Int64(v[1]); err != nil {
				return r, fmt.Errorf("result %d: %w", i, err)
			}
		}
		if len(v) >= 3 {
			if res.text, ok = v[2].(string); !ok {
				return r, fmt.Errorf("result %d: text is %T", i, v[2])
			}
		}
		if len(v) == 4 {
			if res.text2, ok = v[3].(string); !ok {
				return r, fmt.Errorf("result %d: second text is %T", i, v[3])
			}
		}
		r.results = append(r.results, res)
	}
	grants, ok := arr[2].([]any)
	if !ok {
		return r, fmt.Errorf("grants: %T", arr[2])
	}
	for i, e := range grants {
		g, err := decodeGrant(e)
		if err != nil {
			return r, fmt.Errorf("grant %d: %w", i, err)
		}
		r.grants = append(r.grants, g)
	}
	t, err := ratelimit.Int64(arr[3])
	if err != nil {
		return r, fmt.Errorf("timer: %w", err)
	}
	r.timer = -1
	if t >= 0 {
		r.timer = time.Duration(t) * time.Microsecond
	}
	q, err := ratelimit.Int64(arr[4])
	if err != nil {
		return r, fmt.Errorf("queued: %w", err)
	}
	r.queued = int(q)
	return r, nil
}

// decodeGrant reads a grant of the step's reply (grant_reply in
// lua/lib.lua): "wid|id|token|expiry_us|cost|granted_us|owner", "wid|"
// for a grant lost unclaimed, or "wid|!max|disabled|by" for a waiter
// whose cost never fits (never_fits_reply). Its strings share the reply's
// memory.
func decodeGrant(e any) (grant, error) {
	s, ok := e.(string)
	if !ok {
		return grant{}, fmt.Errorf("unexpected shape %T", e)
	}
	var g grant
	var f [5]string
	rest := s
	if g.wid, rest, ok = strings.Cut(rest, "|"); !ok {
		return g, fmt.Errorf("%q has no credential", s)
	}
	if rest == "" {
		g.lost = true
		return g, nil
	}
	if nf, ok := cutPrefix(rest, "!"); ok {
		largest, rest, ok1 := strings.Cut(nf, "|")
		disabled, by, ok2 := strings.Cut(rest, "|")
		if !ok1 || !ok2 {
			return g, fmt.Errorf("%q: a never-fits answer has 4 fields", s)
		}
		n, err := strconv.ParseInt(largest, 10, 64)
		if err != nil {
			return g, fmt.Errorf("largest cost: not an integer: %q", largest)
		}
		g.neverFits = &neverFits{max: n, by: by, disabled: disabled}
		return g, nil
	}
	for i := range f {
		if f[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return g, fmt.Errorf("%q has %d fields, want 7", s, i+2)
		}
	}
	g.id, g.owner = f[0], rest
	var tok, exp, at int64
	var err error
	for _, v := range []struct {
		dst  *int64
		text string
		what string
	}{{&tok, f[1], "token"}, {&exp, f[2], "expiry"}, {&g.cost, f[3], "cost"}, {&at, f[4], "grant time"}} {
		if *v.dst, err = strconv.ParseInt(v.text, 10, 64); err != nil {
			return g, fmt.Errorf("%s: not an integer: %q", v.what, v.text)
		}
	}
	g.token, g.expires, g.at = uint64(tok), time.UnixMicro(exp), time.UnixMicro(at)
	return g, nil
}

// joinGroup records which credentials a group may use (a WithOnly
// handle's, a KeySet's).
func (p *Pool) joinGroup(ctx context.Context, group string, ids []string) error {
	args := make([]any, 0, 1+len(ids))
	args = append(args, group)
	for _, id := range ids {
		args = append(args, id)
	}
	if err := joinScript.Run(ctx, p.scripts, []string{p.keys.creds}, args...).Err(); err != nil {
		return fmt.Errorf("creds: pool %q: record the handle's credentials: %w", p.name, err)
	}
	return nil
}
