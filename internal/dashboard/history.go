package dashboard

import (
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
)

// credPoint is one credential's figures at one sample.
type credPoint struct {
	Starts, RateLimited int64 // cumulative counters
	InFlight, Max       int
}

// poolSample is the pool at one moment.
type poolSample struct {
	At    time.Time
	Creds map[string]credPoint
}

// history keeps the last samples of the pool in a ring: enough for the
// charts' window, bounded whatever the run's length.
type history struct {
	mu      sync.Mutex
	samples []poolSample // ring
	next    int          // where the next sample goes
	full    bool
	seq     uint64 // samples taken so far
}

func newHistory(capacity int) *history {
	return &history{samples: make([]poolSample, max(capacity, 2))}
}

// add records the pool as the report shows it.
func (h *history) add(at time.Time, p status.Pool) {
	s := poolSample{At: at, Creds: make(map[string]credPoint, len(p.Credentials))}
	for _, c := range p.Credentials {
		s.Creds[c.ID] = credPoint{Starts: c.Starts, RateLimited: c.RateLimited, InFlight: c.InFlight, Max: c.MaxConcurrent}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples[h.next] = s
	h.next = (h.next + 1) % len(h.samples)
	h.full = h.full || h.next == 0
	h.seq++
}

// series returns one credential's chart data: the samples in time order
// that hold it, turned into rates between consecutive samples.
func (h *history) series(id string) (chartSeries, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ordered []poolSample
	if h.full {
		ordered = append(ordered, h.samples[h.next:]...)
	}
	ordered = append(ordered, h.samples[:h.next]...)
	out := chartSeries{ID: id}
	if len(ordered) > 0 {
		out.Oldest = ordered[0].At
	}
	found := false
	var prev *poolSample
	var prevPt credPoint
	for i := range ordered {
		s := &ordered[i]
		pt, ok := s.Creds[id]
		if !ok {
			prev = nil
			continue
		}
		found = true
		out.End = s.At
		out.Max = pt.Max
		p := chartPoint{At: s.At, InFlight: pt.InFlight, StartsPerSec: -1, LimitedPerSec: -1}
		if prev != nil {
			if dt := s.At.Sub(prev.At).Seconds(); dt > 0 {
				p.StartsPerSec = max(0, float64(pt.Starts-prevPt.Starts)) / dt
				p.LimitedPerSec = max(0, float64(pt.RateLimited-prevPt.RateLimited)) / dt
			}
		}
		out.Points = append(out.Points, p)
		prev, prevPt = s, pt
	}
	return out, found
}

// chartSeries is what one credential's chart shows.
type chartSeries struct {
	ID     string
	Oldest time.Time // the oldest sample kept (of any credential)
	End    time.Time // the newest sample
	Max    int       // max_concurrent at the newest sample
	Points []chartPoint
}

// minChartSpan is the shortest time a chart spans: a dashboard started a
// moment ago shows its first minute, not ten empty ones.
const minChartSpan = time.Minute

// span is how far back the chart goes: what the samples cover, at least
// minChartSpan, at most limit.
func (s chartSeries) span(limit time.Duration) time.Duration {
	covered := s.End.Sub(s.Oldest)
	switch {
	case covered < minChartSpan:
		return min(minChartSpan, limit)
	case covered > limit:
		return limit
	}
	return covered.Round(10 * time.Second)
}

// chartPoint is one sample; the rates are -1 where there is no earlier
// sample to take a difference with.
type chartPoint struct {
	At            time.Time
	StartsPerSec  float64
	LimitedPerSec float64
	InFlight      int
}
