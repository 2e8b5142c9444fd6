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
	CommitBatch      prometheus.Histogram
	// Requests counts the API requests items made, by kind and how:
	// ViaRealTime (a run of the item) or ViaBatchAPI (a request a
	// provider batch ran).
	Requests *prometheus.CounterVec // kind, via
	// ProviderBatches counts provider batches by provider and event
	// (created, done, cancelled, real_time: sent items to real time).
	ProviderBatches *prometheus.CounterVec // provider, event
	// SpentTwice counts the requests a provider batch ran after keyfleet
	// had given up waiting for its cancel and sent their items to real
	// time: paid twice (Batch API and real time), recorded once.
	SpentTwice *prometheus.CounterVec // provider
	// Spend is what provider runs cost at their models' prices
	// (pool.prices), by tenant ("" none) and model.
	Spend *prometheus.CounterVec // tenant, model
	// Fallbacks counts the items (and gateway requests) of a kind that
	// started on one of its fallback kinds, by kind, fallback kind (to)
	// and why (waited, failing).
	Fallbacks *prometheus.CounterVec // kind, to, why
}

// Values of the via label of Requests.
const (
	ViaRealTime = "real_time"
	ViaBatchAPI = "batch_api"
)

// New registers the metrics in a fresh registry, with the Go and process
// collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		Items: counterVec("keyfleet_items_total",
			"Job runs by kind and outcome (succeeded, failed, rate_limited, rejected, retried, interrupted).", "kind", "outcome"),
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
		InFlight: gaugeVec("keyfleet_credential_in_flight",
			"Jobs this worker runs now, per credential.", "credential"),
		Cooldowns: counterVec("keyfleet_credential_cooldowns_total",
			"Rate limits that put a credential into cooldown, by where the wait came from (retry_after or default).", "credential", "source"),
		Rejections: counterVec("keyfleet_credential_rejections_total",
			"Credentials disabled because the API rejected them, by cause.", "credential", "cause"),
		SlotsBusy: gauge("keyfleet_slots_busy",
			"Slots holding an item (waiting for a credential or running)."),
		Slots: gauge("keyfleet_slots",
			"Slots of this worker (its concurrency)."),
		Redeliveries: counter("keyfleet_redeliveries_total",
			"Messages received that had been delivered before."),
		LeaseRenewFails: counter("keyfleet_lease_renew_failures_total",
			"Lease renewals that failed (lost lease or Redis error)."),
		LeasesLost: counter("keyfleet_leases_lost_total",
			"Jobs cancelled because their credential lease was lost."),
		MessagesLost: counter("keyfleet_messages_lost_total",
			"Jobs cancelled because their message could not be kept alive."),
		DeadLetters: counterVec("keyfleet_dead_letters_total",
			"Items dead-lettered, by kind and reason.", "kind", "reason"),
		FetchBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_fetch_messages",
			Help:    "Messages received per pull request (each asks for as many as there are free slots).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		CommitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_commit_items",
			Help:    "Succeeded items per group commit (results stored, then their acks confirmed together).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		Requests: counterVec("keyfleet_requests_total",
			"API requests of items, by kind and via: real_time (a run of the item on a key) or batch_api (a request a provider batch ran, at the Batch API's price).", "kind", "via"),
		ProviderBatches: counterVec("keyfleet_provider_batches_total",
			"Provider batches (Batch API) by provider and event: created, done, cancelled (at the provider, by keyfleet), real_time (some of its items sent to real time).", "provider", "event"),
		SpentTwice: counterVec("keyfleet_batch_api_requests_spent_twice_total",
			"Requests a provider batch (Batch API) finished after keyfleet, no longer waiting for the provider to end its cancel for the deadline, had sent their items to real time: paid twice, recorded once (real time's result), by provider.", "provider"),
		Spend: counterVec("keyfleet_spend_total",
			"What provider runs cost at their models' prices (pool.prices, in its currency), by tenant and model; through a Batch API at its discount.", "tenant", "model"),
		Fallbacks: counterVec("keyfleet_fallbacks_total",
			"Items of a kind that started on one of its fallback kinds (jobs.kinds.<kind>.fallback), by kind, the kind they ran on (to) and why: waited (no key of their own kind within its after) or failing (their runs failed transiently twice in a row on its keys).", "kind", "to", "why"),
		RedisUnavailable: counter("keyfleet_redis_unavailable_total",
			"Credential acquisitions that failed because Redis could not be reached (no job runs then)."),
	}
	r.MustRegister(m.Items, m.JobDuration, m.CredentialWait, m.Attempts, m.InFlight, m.Cooldowns,
		m.Rejections, m.SlotsBusy, m.Slots, m.Redeliveries, m.LeaseRenewFails, m.LeasesLost,
		m.MessagesLost, m.DeadLetters, m.RedisUnavailable, m.FetchBatch, m.CommitBatch, m.Requests, m.ProviderBatches, m.SpentTwice, m.Spend)
	r.MustRegister(m.Fallbacks)
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}
