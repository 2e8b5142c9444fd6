package metrics

import "github.com/prometheus/client_golang/prometheus"

// Gateway are the gateway's metrics (docs/gateway.md), in the worker's
// registry: requests by kind and status, the wait for a key, and the
// latency the gateway adds to a request (its time minus the API's).
type Gateway struct {
	// Requests counts the answers by kind ("" when the path named none)
	// and HTTP status (the API's, or the gateway's own: 401, 404, 429).
	Requests *prometheus.CounterVec // kind, status
	// KeyWait is how long requests waited for a key, 429s retried on
	// other keys included.
	KeyWait prometheus.Histogram
	// AddedLatency is the time a request spent in the gateway outside the
	// API's round trips: reading it, waiting for a key, settling.
	AddedLatency prometheus.Histogram
	// Retries counts requests sent again on another key, by kind and
	// cause (rate_limited, refused_connection).
	Retries *prometheus.CounterVec // kind, cause
	// InFlight is the number of requests being answered.
	InFlight prometheus.Gauge
}

// NewGateway registers the gateway's metrics in m's registry.
func (m *Metrics) NewGateway() *Gateway {
	g := &Gateway{
		Requests: counterVec("keyfleet_gateway_requests_total",
			"Gateway requests answered, by kind and HTTP status (the API's, or the gateway's own 401, 404, 429).", "kind", "status"),
		KeyWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_gateway_key_wait_seconds",
			Help:    "Time a gateway request waited for a key (429s retried on other keys included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 15),
		}),
		AddedLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keyfleet_gateway_added_latency_seconds",
			Help:    "Time a gateway request spent in the gateway outside the API's round trips (reading it, waiting for a key, settling).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		Retries: counterVec("keyfleet_gateway_retries_total",
			"Gateway requests sent again on another key, by kind and cause (rate_limited, refused_connection).", "kind", "cause"),
		InFlight: gauge("keyfleet_gateway_in_flight", "Gateway requests being answered."),
	}
	m.Registry.MustRegister(g.Requests, g.KeyWait, g.AddedLatency, g.Retries, g.InFlight)
	return g
}
