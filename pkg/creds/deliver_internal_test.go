package creds

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// localTime is never later than the moment it maps: the pair's call ran
// on Redis after it was sent, so Redis's clock is read as at least that
// far ahead.
func TestLocalTimeIsNoLaterThanTheMoment(t *testing.T) {
	base := time.Now()
	const offset = 5 * time.Second // Redis's clock ahead of this process's
	onRedis := func(local time.Time) int64 { return local.Add(offset).UnixMicro() }
	for _, tc := range []struct {
		name  string
		delay time.Duration // from the pair's send to its run on Redis
		grant time.Duration // the grant, after the send
	}{
		{"grant after the pair, instant call", 0, 300 * time.Millisecond},
		{"grant after the pair, slow call", 40 * time.Millisecond, 300 * time.Millisecond},
		{"grant before the pair's call ran", 40 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clockPair{sent: base, redisUS: onRedis(base.Add(tc.delay))}
			grant := base.Add(tc.grant)
			got, ok := c.localTime(onRedis(grant))
			if !ok {
				t.Fatal("no mapping with a pair")
			}
			if got.After(grant) {
				t.Fatalf("mapped to %s after the moment", got.Sub(grant))
			}
			// Redis's clock is read in µs: the early side is the pair's
			// delay, to a µs.
			if d := grant.Sub(got); d < tc.delay-time.Microsecond || d > tc.delay+time.Microsecond {
				t.Fatalf("mapped %s early, want the pair's delay %s", d, tc.delay)
			}
		})
	}
	if _, ok := (clockPair{}).localTime(1); ok {
		t.Fatal("a mapping without a pair")
	}
}

// A grant message delivers each of its grants to its waiter; what it
// cannot deliver (an unknown waiter, a grant shorter-lived than the
// handle's lease TTL, a message it cannot read) is left to a step: it
// reports false, and the waiters it did not deliver to keep waiting.
func TestDeliverAll(t *testing.T) {
	const ttl = 10 * time.Second
	now := time.Now()
	us := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMicro(), 10) }
	grant := func(wid string, life time.Duration, owner string) string {
		g := wid + "|k1|42|" + us(life) + "|1|" + us(0) + "|" + owner
		return strconv.Itoa(len(g)) + ":" + g
	}
	newDispatcher := func(wids ...string) *dispatcher {
		p := &Pool{ttl: ttl}
		p.d.init(p)
		p.d.clock = clockPair{sent: now.Add(-time.Millisecond), redisUS: now.Add(-time.Millisecond).UnixMicro()}
		for _, wid := range wids {
			p.d.waiters[wid] = &waiter{wid: wid, owner: "o", res: make(chan waitResult, 1)}
		}
		return &p.d
	}
	for _, tc := range []struct {
		name      string
		wids      []string
		msg       string
		all       bool
		delivered []string
	}{
		{"two grants", []string{"a.1", "a.2"}, grant("a.1", ttl, "o") + grant("a.2", ttl, "o"), true, []string{"a.1", "a.2"}},
		{"an owner holding ':' and '|'", []string{"a.1"}, grant("a.1", ttl, "w:1|x"), true, []string{"a.1"}},
		{"one waiter gone", []string{"a.2"}, grant("a.1", ttl, "o") + grant("a.2", ttl, "o"), false, []string{"a.2"}},
		{"a grant shorter than the lease TTL", []string{"a.1"}, grant("a.1", 2*time.Second, "o"), false, nil},
		{"a length past the end", []string{"a.1"}, "999:" + grant("a.1", ttl, "o")[4:], false, nil},
		{"no length", []string{"a.1"}, "a.1|k1", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDispatcher(tc.wids...)
			ws := map[string]*waiter{}
			for wid, w := range d.waiters {
				ws[wid] = w
			}
			if got := d.deliverAll(tc.msg); got != tc.all {
				t.Fatalf("deliverAll = %v, want %v", got, tc.all)
			}
			for wid, w := range ws {
				want := slices.Contains(tc.delivered, wid)
				select {
				case r := <-w.res:
					if !want {
						t.Fatalf("%s got %+v, want nothing", wid, r)
					}
					if r.lease == nil || r.lease.CredentialID != "k1" || r.lease.Token != 42 || r.lease.RequestedAt.After(time.Now()) {
						t.Fatalf("%s got %+v", wid, r.lease)
					}
					if _, ok := d.delivered[wid]; !ok || d.waiters[wid] != nil {
						t.Fatalf("%s delivered but not recorded as such", wid)
					}
				default:
					if want {
						t.Fatalf("%s got nothing", wid)
					}
					if d.waiters[wid] != w {
						t.Fatalf("%s left its waiters without a lease", wid)
					}
				}
			}
		})
	}
}
