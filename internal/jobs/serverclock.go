package jobs

import (
	"net/http"
	"sync"
	"time"
)

// ServerClocks estimates, per API host, how far the host's clock is from
// this machine's, from the Date header of its replies, so that the times
// a reply names (Anthropic's resets, a Retry-After date) are read on the
// host's clock: a reset 2 s away on the host is 2 s away here, whatever
// the two clocks say.
//
// A reply's Date is the host's time, in whole seconds rounded down, at
// some moment between the request's leaving (sent) and the reply's
// arrival (received). So the host's clock is ahead of ours by at least
// Date − received and by less than Date + 1 s − sent. The replies of the
// last one to two minutes narrow these bounds, and the correction is
// the smallest skew they prove: none while the bounds hold 0 (as when
// both clocks keep time), else the bound nearest 0. A reply whose bounds
// do not meet the others' (a clock stepped, or hosts behind one name
// disagree) starts the estimate again from that reply.
//
// The zero value is ready to use; it is safe for concurrent use.
type ServerClocks struct {
	mu    sync.Mutex
	hosts map[string]*hostClock
}

// skewWindow is how long a set of bounds is added to before it is kept
// only as the previous one: the estimate rests on the replies of the last
// one to two windows.
const skewWindow = time.Minute

// hostClock is one host's bounds on (its clock − ours), now's and the
// previous window's.
type hostClock struct {
	cur, prev skewBounds
	curFrom   time.Time
}

// skewBounds hold the skew between lo and hi; ok says it holds any.
type skewBounds struct {
	lo, hi time.Duration
	ok     bool
}

func (b skewBounds) meet(o skewBounds) skewBounds {
	if !b.ok {
		return o
	}
	if !o.ok {
		return b
	}
	m := skewBounds{lo: max(b.lo, o.lo), hi: min(b.hi, o.hi), ok: true}
	m.ok = m.lo <= m.hi
	return m
}

// Observe narrows host's bounds with a reply's headers: sent is when its
// request left (or any time before), received when its headers arrived
// (or any time after). A reply without a readable Date header is ignored.
func (c *ServerClocks) Observe(host string, h http.Header, sent, received time.Time) {
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil || sent.IsZero() || received.Before(sent) {
		return
	}
	sample := skewBounds{lo: date.Sub(received), hi: date.Add(time.Second).Sub(sent), ok: true}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hosts == nil {
		c.hosts = make(map[string]*hostClock)
	}
	hc := c.hosts[host]
	if hc == nil {
		hc = &hostClock{}
		c.hosts[host] = hc
	}
	switch age := received.Sub(hc.curFrom); {
	case age >= 2*skewWindow:
		hc.cur, hc.prev, hc.curFrom = skewBounds{}, skewBounds{}, received
	case age >= skewWindow:
		hc.cur, hc.prev, hc.curFrom = skewBounds{}, hc.cur, received
	}
	if next := hc.cur.meet(sample); next.ok {
		hc.cur = next
		return
	}
	hc.cur, hc.prev, hc.curFrom = sample, skewBounds{}, received
}

// Now returns host's time at local, as far as its replies prove it:
// local plus the smallest skew consistent with them (none unless they
// exclude 0).
func (c *ServerClocks) Now(host string, local time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[host]
	if hc == nil {
		return local
	}
	b := hc.cur.meet(hc.prev)
	if !b.ok {
		b = hc.cur
	}
	switch {
	case !b.ok:
		return local
	case b.lo > 0:
		return local.Add(b.lo)
	case b.hi < 0:
		return local.Add(b.hi)
	}
	return local
}
