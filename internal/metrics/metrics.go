// Package metrics defines the worker's Prometheus metrics. Label values are
// job kinds, outcomes, credential IDs and short causes: never secrets, never
// item or batch IDs (unbounded).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics of one worker process.
type Metrics struct {
	Registry *prometheus.Registry

	Items            *prometheus.CounterVec   // kind, outcome
	JobDuration      *prometheus.HistogramVec // kind
	CredentialWait   prometheus.Histogram
	Attempts         *prometheus.HistogramVec // kind, outcome (final outcomes only)
	InFlight         *prometheus.GaugeVec     // credential
	Cooldowns        *prometheus.CounterVec   // credential, source
	Rejections       *prometheus.CounterVec   // credential, cause
	SlotsBusy        prometheus.Gauge
	Slots            prometheus.Gauge
	Redeliveries     prometheus.Counter
	LeaseRenewFails  prometheus.Counter
	LeasesLost       prometheus.Counter
	MessagesLost     prometheus.Counter
	DeadLetters      *prometheus.CounterVec // kind, reason
	RedisUnavailable prometheus.Counter
	FetchBatch       prometheus.Histogram
}

// New registers the metrics in a fresh registry, with the Go and process
// collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		Items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyfleet_items_total",
			Help: "Job runs by kind and outcome (succeeded, failed, rate_limited, rejected, retried, interrupted).",
		}, []string{"kind", "outcome"}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keyfleet_job_duration_seconds",
			Help:    "Duration of job runs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16),
		}, []string{"kind"}),
		CredentialWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_credential_wait_seconds",
			Help:    "Time an item waited for a credential lease.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 15),
		}),
		Attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keyfleet_item_attempts",
			Help:    "Runs an item took until its final outcome.",
			Buckets: []float64{1, 2, 3, 4, 5, 7, 10, 15, 20, 50},
		}, []string{"kind", "outcome"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "keyfleet_credential_in_flight",
			Help: "Jobs this worker runs now, per credential.",
		}, []string{"credential"}),
		Cooldowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyfleet_credential_cooldowns_total",
			Help: "Rate limits that put a credential into cooldown, by where the wait came from (retry_after or default).",
		}, []string{"credential", "source"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyfleet_credential_rejections_total",
			Help: "Credentials disabled because the API rejected them, by cause.",
		}, []string{"credential", "cause"}),
		SlotsBusy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keyfleet_slots_busy",
			Help: "Slots holding an item (waiting for a credential or running).",
		}),
		Slots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keyfleet_slots",
			Help: "Slots of this worker (its concurrency).",
		}),
		Redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyfleet_redeliveries_total",
			Help: "Messages received that had been delivered before.",
		}),
		LeaseRenewFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyfleet_lease_renew_failures_total",
			Help: "Lease renewals that failed (lost lease or Redis error).",
		}),
		LeasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyfleet_leases_lost_total",
			Help: "Jobs cancelled because their credential lease was lost.",
		}),
		MessagesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyfleet_messages_lost_total",
			Help: "Jobs cancelled because their message could not be kept alive.",
		}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyfleet_dead_letters_total",
			Help: "Items dead-lettered, by kind and reason.",
		}, []string{"kind", "reason"}),
		FetchBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_fetch_messages",
			Help:    "Messages received per pull request (each asks for as many as there are free slots).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		RedisUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keyfleet_redis_unavailable_total",
			Help: "Credential acquisitions that failed because Redis could not be reached (no job runs then).",
		}),
	}
	r.MustRegister(m.Items, m.JobDuration, m.CredentialWait, m.Attempts, m.InFlight, m.Cooldowns,
		m.Rejections, m.SlotsBusy, m.Slots, m.Redeliveries, m.LeaseRenewFails, m.LeasesLost,
		m.MessagesLost, m.DeadLetters, m.RedisUnavailable, m.FetchBatch)
	return m
}
