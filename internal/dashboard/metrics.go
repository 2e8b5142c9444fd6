package dashboard

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// poolMetrics exports the pool as one process sees it, for Prometheus:
// what every worker would otherwise each read from Redis. Gauges and the
// counters kept in Redis come from the latest reading; the time each key
// could not start, by cause, is added up between readings.
type poolMetrics struct {
	reg *prometheus.Registry

	mu      sync.Mutex
	last    status.Report
	have    bool
	blocked map[[2]string]float64 // {credential, cause} -> seconds
}

func newPoolMetrics() *poolMetrics {
	m := &poolMetrics{reg: prometheus.NewRegistry(), blocked: map[[2]string]float64{}}
	m.reg.MustRegister(m)
	return m
}

// maxBlockedStep bounds the time one reading may add to a blocked counter
// (a reading that failed for a while must not count the gap).
const maxBlockedStep = 10 * time.Second

// observe takes a reading: the time since the previous one is added to
// the causes that kept each key from starting then.
func (m *poolMetrics) observe(rep status.Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.have {
		dt := rep.Pool.At.Sub(m.last.Pool.At)
		if dt > 0 && dt <= maxBlockedStep {
			prev := map[string]status.Credential{}
			for _, c := range m.last.Pool.Credentials {
				prev[c.ID] = c
			}
			for _, c := range rep.Pool.Credentials {
				if p, ok := prev[c.ID]; ok {
					for _, cause := range blockedBy(p, m.last.Pool.At) {
						m.blocked[[2]string{c.ID, cause}] += dt.Seconds()
					}
				}
			}
		}
	}
	m.last, m.have = rep, true
}

// blockedBy names what keeps a credential from taking a start at `at`:
// disabled, rest, max_concurrent, pace, or a limit ("rate=10/s,burst=1").
func blockedBy(c status.Credential, at time.Time) []string {
	switch {
	case c.State == creds.StateDisabled:
		return []string{"disabled"}
	case c.CoolingUntil != nil && c.CoolingUntil.After(at):
		return []string{"rest"}
	case c.NextStart == nil || !c.NextStart.After(at):
		return nil
	}
	var out []string
	if c.InFlight >= c.MaxConcurrent {
		out = append(out, "max_concurrent")
	}
	for _, l := range c.Limits {
		if l.NextRoom != nil && l.NextRoom.After(at) {
			out = append(out, l.Limit)
		}
	}
	if len(out) == 0 && c.PaceMS > 0 {
		out = append(out, "pace")
	}
	return out
}

var (
	descState       = prometheus.NewDesc("keyfleet_pool_credential_state", "1 for the credential's state now (available, busy, cooling, disabled).", []string{"credential", "state"}, nil)
	descInFlight    = prometheus.NewDesc("keyfleet_pool_in_flight", "Leases held on the credential, fleet-wide.", []string{"credential"}, nil)
	descStarts      = prometheus.NewDesc("keyfleet_pool_starts_total", "Leases granted on the credential since it was registered.", []string{"credential"}, nil)
	descRateLimited = prometheus.NewDesc("keyfleet_pool_rate_limited_total", "Rate-limited runs on the credential since it was registered.", []string{"credential"}, nil)
	descLimitUsed   = prometheus.NewDesc("keyfleet_pool_limit_used", "Use of each limit in its window now: starts or cost units (for a smooth rate, the burst's cells in use).", []string{"credential", "limit"}, nil)
	descLimitOf     = prometheus.NewDesc("keyfleet_pool_limit_capacity", "What each limit allows in its window (for a smooth rate, its burst).", []string{"credential", "limit"}, nil)
	descBlocked     = prometheus.NewDesc("keyfleet_pool_blocked_seconds_total", "Time the credential could not take a start, by cause: a limit, max_concurrent, rest, pace or disabled (added up by this dashboard between its readings).", []string{"credential", "cause"}, nil)
	descPace        = prometheus.NewDesc("keyfleet_pool_pace_seconds", "Spacing of starts learnt from bare 429s (0: none).", []string{"credential"}, nil)
	descWaiting     = prometheus.NewDesc("keyfleet_pool_waiting", "Acquires queued fleet-wide for a credential.", nil, nil)
	descCredAccount = prometheus.NewDesc("keyfleet_pool_credential_account", "1 for each credential of an account (pool.accounts): the keys that share its limits.", []string{"credential", "account"}, nil)
	descAcctState   = prometheus.NewDesc("keyfleet_pool_account_state", "1 for the account's state now (available, busy, cooling).", []string{"account", "state"}, nil)
	descAcctFlight  = prometheus.NewDesc("keyfleet_pool_account_in_flight", "Leases held on the account's keys, fleet-wide.", []string{"account"}, nil)
	descAcctStarts  = prometheus.NewDesc("keyfleet_pool_account_starts_total", "Starts on the account's keys since it was registered.", []string{"account"}, nil)
	descAcctLimited = prometheus.NewDesc("keyfleet_pool_account_rate_limited_total", "Rate-limited runs on the account's keys since it was registered.", []string{"account"}, nil)
	descAcctUsed    = prometheus.NewDesc("keyfleet_pool_account_limit_used", "Use of each limit of the account in its window now.", []string{"account", "limit"}, nil)
	descAcctOf      = prometheus.NewDesc("keyfleet_pool_account_limit_capacity", "What each limit of the account allows in its window.", []string{"account", "limit"}, nil)
	descAcctPace    = prometheus.NewDesc("keyfleet_pool_account_pace_seconds", "Spacing of the account's starts learnt from bare 429s (0: none).", []string{"account"}, nil)
	descAcctRest    = prometheus.NewDesc("keyfleet_pool_account_resting_seconds", "Time left of the account's rest, by the signal that caused it (0 rows: not resting).", []string{"account", "cause"}, nil)
	descBacklog     = prometheus.NewDesc("keyfleet_queue_backlog", "Items not yet settled: pending + ack pending (what an autoscaler reads).", nil, nil)
)

// Describe is part of prometheus.Collector.
func (m *poolMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descInFlight, descStarts, descRateLimited, descLimitUsed, descLimitOf, descBlocked, descPace, descWaiting, descBacklog,
		descCredAccount, descAcctState, descAcctFlight, descAcctStarts, descAcctLimited, descAcctUsed, descAcctOf, descAcctPace, descAcctRest} {
		ch <- d
	}
}

// Collect is part of prometheus.Collector.
func (m *poolMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.have {
		return
	}
	p := m.last.Pool
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(p.Waiting))
	ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(m.last.Consumer.Pending)+float64(m.last.Consumer.AckPending))
	for _, c := range p.Credentials {
		for _, st := range []string{creds.StateAvailable, creds.StateBusy, creds.StateCooling, creds.StateDisabled} {
			v := 0.0
			if c.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, c.ID, st)
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(c.InFlight), c.ID)
		ch <- prometheus.MustNewConstMetric(descStarts, prometheus.CounterValue, float64(c.Starts), c.ID)
		ch <- prometheus.MustNewConstMetric(descRateLimited, prometheus.CounterValue, float64(c.RateLimited), c.ID)
		ch <- prometheus.MustNewConstMetric(descPace, prometheus.GaugeValue, c.PaceMS/1000, c.ID)
		for _, l := range c.Limits {
			ch <- prometheus.MustNewConstMetric(descLimitUsed, prometheus.GaugeValue, float64(l.Used), c.ID, l.Limit)
			ch <- prometheus.MustNewConstMetric(descLimitOf, prometheus.GaugeValue, float64(l.Of), c.ID, l.Limit)
		}
		if c.Account != "" {
			ch <- prometheus.MustNewConstMetric(descCredAccount, prometheus.GaugeValue, 1, c.ID, c.Account)
		}
	}
	for _, a := range p.Accounts {
		for _, st := range []string{creds.StateAvailable, creds.StateBusy, creds.StateCooling} {
			v := 0.0
			if a.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descAcctState, prometheus.GaugeValue, v, a.ID, st)
		}
		ch <- prometheus.MustNewConstMetric(descAcctFlight, prometheus.GaugeValue, float64(a.InFlight), a.ID)
		ch <- prometheus.MustNewConstMetric(descAcctStarts, prometheus.CounterValue, float64(a.Starts), a.ID)
		ch <- prometheus.MustNewConstMetric(descAcctLimited, prometheus.CounterValue, float64(a.RateLimited), a.ID)
		ch <- prometheus.MustNewConstMetric(descAcctPace, prometheus.GaugeValue, a.PaceMS/1000, a.ID)
		for _, l := range a.Limits {
			ch <- prometheus.MustNewConstMetric(descAcctUsed, prometheus.GaugeValue, float64(l.Used), a.ID, l.Limit)
			ch <- prometheus.MustNewConstMetric(descAcctOf, prometheus.GaugeValue, float64(l.Of), a.ID, l.Limit)
		}
		if a.CoolingUntil != nil && a.CoolingUntil.After(p.At) {
			// The signal's name only (a bare 429's cause goes on with its
			// pace, which would make a label of every value).
			cause, _, _ := strings.Cut(a.RestCause, ":")
			if cause == "" {
				cause = "rest"
			}
			ch <- prometheus.MustNewConstMetric(descAcctRest, prometheus.GaugeValue, a.CoolingUntil.Sub(p.At).Seconds(), a.ID, cause)
		}
	}
	for k, v := range m.blocked {
		ch <- prometheus.MustNewConstMetric(descBlocked, prometheus.CounterValue, v, k[0], k[1])
	}
}

func (m *poolMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
