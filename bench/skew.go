package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Where the 429s of an API that counts arrivals come from, when the pool
// counts grants (scenario 13b). Each 429 is set against two windows: the
// API's at its arrival a (the requests it had admitted in (a−P, a]), and
// the pool's at its lease's grant g (every grant in (g−P, g], 429s
// included). A request the API counted but the pool did not was granted
// outside (g−P, g]: before (it took longer from grant to arrival than the
// refused one) or after (it overtook it). The breakdown:
//
//   - jitter: without those requests the API would have admitted the
//     refused one (grant → arrival skew);
//   - cost: else, without the difference between what the API counted
//     for the requests both windows hold and what the pool had charged
//     for them at g (the estimate until the run's release, the reported
//     cost after; the API counts the estimate until the answer, then the
//     real tokens);
//   - other: neither.
//
// The pool's side comes from its Redis logs, followed during the run
// (poolLog): the sliding-window log of starts holds every grant's fencing
// token and time for a window, so a read every second misses none; each
// 429's lease token is read from the credential's leases the moment the
// API answers, before the answer leaves.

// poolLog follows a pool's window logs in Redis (the bench's own server,
// one pool at a time).
type poolLog struct {
	rdb    *redis.Client
	creds  []string
	period time.Duration

	mu     sync.Mutex
	pfx    string                      // "keyfleet:{<pool>}:" once found
	grants map[string]map[string]int64 // credential → fencing token → grant (µs, Redis's clock)
	first  error
}

func newPoolLog(rdb *redis.Client, creds []string, period time.Duration) *poolLog {
	p := &poolLog{rdb: rdb, creds: creds, period: period, grants: map[string]map[string]int64{}}
	for _, c := range creds {
		p.grants[c] = map[string]int64{}
	}
	return p
}

// follow reads every credential's log every second until ctx ends.
func (p *poolLog) follow(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, c := range p.creds {
			p.poll(ctx, c)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prefix finds the pool's key prefix (its registry is "<prefix>creds").
func (p *poolLog) prefix(ctx context.Context) string {
	p.mu.Lock()
	pfx := p.pfx
	p.mu.Unlock()
	if pfx != "" {
		return pfx
	}
	keys, _, err := p.rdb.Scan(ctx, 0, "keyfleet:{*}:creds", 1000).Result()
	if err != nil || len(keys) == 0 {
		return ""
	}
	pfx = strings.TrimSuffix(keys[0], "creds")
	p.mu.Lock()
	p.pfx = pfx
	p.mu.Unlock()
	return pfx
}

// poll adds what credential c's log of starts holds now.
func (p *poolLog) poll(ctx context.Context, c string) {
	pfx := p.prefix(ctx)
	if pfx == "" {
		return
	}
	zs, err := p.rdb.ZRangeWithScores(ctx, pfx+"lw:"+c+":"+strconv.FormatInt(p.period.Microseconds(), 10), 0, -1).Result()
	if err != nil {
		p.fail(ctx, err)
		return
	}
	p.mu.Lock()
	for _, z := range zs {
		p.grants[c][z.Member.(string)] = int64(z.Score)
	}
	p.mu.Unlock()
}

func (p *poolLog) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	if p.first == nil {
		p.first = fmt.Errorf("bench: reading the pool's logs: %w", err)
	}
	p.mu.Unlock()
}

func (p *poolLog) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first
}

// on429 finds the refused run's lease (its owner ends with "/<item>")
// among the credential's leases, and reads the credential's log.
func (p *poolLog) on429(ev *apiEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pfx := p.prefix(ctx)
	if pfx == "" || ev.cred == "" {
		return
	}
	ms, err := p.rdb.ZRange(ctx, pfx+"leases:"+ev.cred, 0, -1).Result()
	if err != nil {
		p.fail(ctx, err)
		return
	}
	for _, m := range ms {
		if token, owner, ok := strings.Cut(m, "|"); ok && strings.HasSuffix(owner, "/"+ev.item) {
			ev.lease = token
		}
	}
	p.poll(ctx, ev.cred)
}

// snapshot is every grant seen, by credential and token.
func (p *poolLog) snapshot() map[string]map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]map[string]time.Time, len(p.grants))
	for c, g := range p.grants {
		out[c] = make(map[string]time.Time, len(g))
		for tok, us := range g {
			out[c][tok] = time.UnixMicro(us)
		}
	}
	return out
}

// skewLimits are the API's limits, what the pool was told of the requests
// limit, and the items' estimated and real costs.
type skewLimits struct {
	period       time.Duration
	latency      time.Duration // the API's time per request: its real tokens replace the estimate then
	requests     int
	tokens       int64
	toldRequests int
	est, actual  map[string]int64
}

// skew is the breakdown of a run's 429s.
type skew struct {
	n, tokens, jitter, cost, other, retry, over, unmatched int
	lead                                                   []float64 // ms
	// lines: one per 429, for the log (see detail).
	lines []string
}

// skewOf breaks down the 429s of events (in arrival order) against the
// pool's grants (by credential and token) and the results (each item's
// last run: its 200's grant).
func skewOf(events []apiEvent, rs []kftype.Result, pool map[string]map[string]time.Time, lim skewLimits) skew {
	type okRun struct {
		item          string
		grant, arrive time.Time
	}
	grantOf := map[string]time.Time{}
	for _, r := range rs {
		grantOf[r.Item] = r.LeasedAt
	}
	admitted := map[string][]okRun{} // credential → its 200s, in arrival order
	for _, ev := range events {
		if ev.status == http.StatusOK {
			admitted[ev.cred] = append(admitted[ev.cred], okRun{item: ev.item, grant: grantOf[ev.item], arrive: ev.at})
		}
	}
	// refusedGrant: the grant of every 429 found, by credential and token.
	var s skew
	seen := map[string]bool{}
	for _, ev := range events {
		if ev.status != http.StatusTooManyRequests {
			continue
		}
		s.n++
		if seen[ev.item] {
			s.retry++
		}
		seen[ev.item] = true
		if ev.limit == "tokens" {
			s.tokens++
		}
		g, found := pool[ev.cred][ev.lease]
		if ev.lease == "" || !found {
			s.unmatched++
			continue
		}
		a := ev.at
		d := a.Sub(g)
		inPool := 0
		for _, t := range pool[ev.cred] {
			if t.After(g.Add(-lim.period)) && !t.After(g) {
				inPool++
			}
		}
		if inPool > lim.toldRequests {
			s.over++
		}
		// view is what a window counted for a 200 run at t: its estimate
		// until its answer, its real tokens after (the pool learns them at
		// the release, a moment after the answer).
		view := func(o okRun, t time.Time) int64 {
			if o.arrive.Add(lim.latency).After(t) {
				return lim.est[o.item]
			}
			return lim.actual[o.item]
		}
		var apiN, skewN int
		var apiT, skewT, diffT int64
		for _, o := range admitted[ev.cred] {
			if !o.arrive.After(a.Add(-lim.period)) || !o.arrive.Before(a) {
				continue
			}
			apiN++
			apiT += view(o, a)
			if !o.grant.After(g.Add(-lim.period)) || o.grant.After(g) {
				skewN++
				skewT += view(o, a)
				if !o.grant.After(g) {
					s.lead = append(s.lead, float64(o.arrive.Sub(o.grant)-d)/float64(time.Millisecond))
				}
			} else {
				diffT += view(o, a) - view(o, g)
			}
		}
		need := lim.est[ev.item]
		s.lines = append(s.lines, fmt.Sprintf("%s %s %s limit=%s grant→arrival=%.2fms pool=%d api=%d/%d tokens api=%d+%d outside=%d/%d estdiff=%d",
			a.Format("15:04:05.000000"), ev.cred, ev.item, ev.limit, float64(d)/float64(time.Millisecond), inPool, apiN, lim.requests,
			apiT, need, skewN, skewT, diffT))
		switch {
		case ev.limit == "tokens" && apiT-skewT+need <= lim.tokens,
			ev.limit != "tokens" && apiN-skewN < lim.requests:
			s.jitter++
		case ev.limit == "tokens" && apiT-skewT-diffT+need <= lim.tokens:
			s.cost++
		default:
			s.other++
		}
	}
	slices.Sort(s.lead)
	return s
}

// add counts o's 429s in s as well.
func (s *skew) add(o skew) {
	s.n += o.n
	s.tokens += o.tokens
	s.jitter += o.jitter
	s.cost += o.cost
	s.other += o.other
	s.retry += o.retry
	s.over += o.over
	s.unmatched += o.unmatched
	s.lead = append(s.lead, o.lead...)
	s.lines = append(s.lines, o.lines...)
}

// put writes the breakdown's figures.
func (s skew) put(smp *sample) {
	smp.values["skew_n"] = float64(s.n)
	smp.values["skew_over"] = float64(s.over)
	smp.values["skew_unmatched"] = float64(s.unmatched)
	if s.n == 0 {
		for _, id := range []string{"skew_tokens", "skew_jitter", "skew_cost", "skew_other", "skew_retry"} {
			smp.missing[id] = "no 429"
		}
	} else {
		n := float64(s.n)
		smp.values["skew_tokens"] = float64(s.tokens) / n
		smp.values["skew_jitter"] = float64(s.jitter) / n
		smp.values["skew_cost"] = float64(s.cost) / n
		smp.values["skew_other"] = float64(s.other) / n
		smp.values["skew_retry"] = float64(s.retry) / n
	}
	if len(s.lead) == 0 {
		smp.missing["skew_lead_p50"] = "no request granted before the pool's window yet inside the API's"
	} else {
		smp.values["skew_lead_p50"] = quantile(s.lead, 0.5)
	}
}
