package creds

import (
	"strconv"
	"strings"
	"time"
)

// The grants another handle's script made to this handle's waiters come
// in one message on this handle's channel ("g", then each grant as its
// length in bytes, ":" and the grant as grant_reply in lua/lib.lua writes
// it) and are recorded in Redis
// (gr:<inst>) in case the message is lost. deliver gives the lease to its
// waiter from the message, without a step: the key's idle time between
// the release that granted it and the start of the next run is one
// message, not a message and a script call. The record is collected by
// this handle's next step, which it runs anyway (the run's release), and
// passed over then (delivered).

// clockPair is one moment on both clocks: a call sent at sent (this
// process's clock, monotonic) ran on Redis at redisUS (Redis's clock, µs).
type clockPair struct {
	sent    time.Time
	redisUS int64
}

// localTime maps a moment of Redis's clock onto this process's clock, no
// later than it really was (to the precision of both clocks' rates): the
// call of the pair ran on Redis no earlier than it was sent, so Redis's
// clock read at least redisUS − (sent on Redis's clock) ahead. It reports
// false when no call has come back yet.
func (c clockPair) localTime(redisUS int64) (time.Time, bool) {
	if c.sent.IsZero() {
		return time.Time{}, false
	}
	return c.sent.Add(time.Duration(redisUS-c.redisUS) * time.Microsecond), true
}

// deliverAll delivers each grant of a message (after its "g") and reports
// whether every one was delivered; false also for a message it cannot
// read, whose grants are then left to a step, as every one not delivered.
func (d *dispatcher) deliverAll(msg string) bool {
	all := true
	for msg != "" {
		n, rest, ok := strings.Cut(msg, ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 1 || size > len(rest) {
			return false
		}
		if !d.deliver(rest[:size]) {
			all = false
		}
		msg = rest[size:]
	}
	return all
}

// deliver hands the granted lease of message g to its waiter and reports
// true, or reports false and leaves it to the claim of a step (which
// makes it a full lease from then, or hands it on when its waiter gave
// up): when the waiter is gone, when the grant lives less than this
// handle's lease TTL (granted by an operator's action or a handle with a
// shorter TTL), or when a quarter of the TTL has passed since the grant.
func (d *dispatcher) deliver(msg string) bool {
	g, err := decodeGrant(msg)
	if err != nil || g.lost || g.neverFits != nil {
		return false
	}
	ttl := d.p.ttl
	if g.expires.Sub(g.at) < ttl {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.waiters[g.wid]
	if w == nil || d.closed {
		return false
	}
	at, ok := d.clock.localTime(g.at.UnixMicro())
	if !ok || time.Since(at) > ttl/4 {
		return false
	}
	now := time.Now()
	for wid, t := range d.delivered {
		if now.Sub(t) > ttl {
			delete(d.delivered, wid) // its record went with Redis's state
		}
	}
	delete(d.waiters, g.wid)
	d.delivered[g.wid] = now
	d.claim = true // the next step collects the record
	l := &Lease{
		CredentialID: g.id, Token: g.token, Cost: g.cost, Acquired: g.at,
		Expires: g.expires, RequestedAt: at, member: g.member(),
		Owner: w.owner, Scope: w.scope,
	}
	w.res <- waitResult{lease: l}
	return true
}
