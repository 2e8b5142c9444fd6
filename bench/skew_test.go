package bench

import (
	"net/http"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

func TestSkewOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	lim := skewLimits{
		period: 10 * time.Second, latency: 20 * time.Millisecond, requests: 2, tokens: 1000, toldRequests: 3,
		est:    map[string]int64{"a": 300, "b": 600, "r": 100, "x": 100, "y": 100, "z": 100},
		actual: map[string]int64{"a": 360, "b": 600, "x": 100, "y": 100, "z": 100},
	}
	// k1, the request limit: x granted at 0 arrives 5 ms later, y at 1 s
	// at once; r granted at 10.001 s arrives 1 ms later: x is in the API's
	// window, not in the pool's (it took 4 ms longer from its grant).
	// k2, the token limit: a (300 charged, 360 used) and b (600) are in
	// flight when r2 is granted at 15 ms (the pool: 900 + 100 fit 1,000),
	// done when it arrives at 30 ms (the API: 960 + 100 do not): the
	// estimate's difference. k3: a 429 whose lease was not found.
	ev := []apiEvent{
		{at: ms(1), cred: "k2", item: "a", status: http.StatusOK},
		{at: ms(3), cred: "k2", item: "b", status: http.StatusOK},
		{at: ms(5), cred: "k1", item: "x", status: http.StatusOK},
		{at: ms(30), cred: "k2", item: "r", status: http.StatusTooManyRequests, limit: "tokens", lease: "t5"},
		{at: ms(1001), cred: "k1", item: "y", status: http.StatusOK},
		{at: ms(10002), cred: "k1", item: "r", status: http.StatusTooManyRequests, limit: "rate", lease: "t3"},
		{at: ms(10003), cred: "k3", item: "z", status: http.StatusTooManyRequests, limit: "rate"},
	}
	rs := []kftype.Result{{Item: "x", LeasedAt: ms(0)}, {Item: "y", LeasedAt: ms(1000)}, {Item: "a", LeasedAt: ms(0)}, {Item: "b", LeasedAt: ms(2)}}
	pool := map[string]map[string]time.Time{
		"k1": {"t1": ms(0), "t2": ms(1000), "t3": ms(10001)},
		"k2": {"t4": ms(0), "t6": ms(2), "t5": ms(15)},
	}
	s := skewOf(ev, rs, pool, lim)
	if s.n != 3 || s.tokens != 1 || s.jitter != 1 || s.cost != 1 || s.other != 0 || s.unmatched != 1 || s.over != 0 || s.retry != 1 {
		t.Errorf("skew = %+v, want 3 429s: 1 by tokens, 1 jitter, 1 cost, 1 unmatched, 1 retry", s)
	}
	if len(s.lead) != 1 || s.lead[0] != 4 {
		t.Errorf("lead = %v, want [4] (ms)", s.lead)
	}

	// The pool's window at r's grant held 4 grants, over the 3 it was told.
	pool["k1"]["t0"], pool["k1"]["t7"] = ms(5000), ms(6000)
	if s := skewOf(ev, rs, pool, lim); s.over != 1 {
		t.Errorf("over = %d, want 1", s.over)
	}
}
