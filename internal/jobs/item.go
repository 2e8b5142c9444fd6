package jobs

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// Item is one unit of work as a handler sees it.
type Item struct {
	// ID is the item's ID (the --id-field value of its input line).
	ID string
	// Batch is the ID of the batch the item was enqueued in.
	Batch string
	// Kind names the handler that runs the item ("exec", "http", "sleep").
	Kind string
	// Attempt is the run number: 1 on the item's first run, +1 on every
	// later run whatever its reason.
	Attempt int
	// Payload is the item's JSON object exactly as enqueued (a provider
	// kind's: the request's body).
	Payload []byte
	// Endpoint is the API path of a provider kind's request when it is not
	// the provider's default (an OpenAI batch line's url); "" otherwise.
	Endpoint string
}

// Credential is the credential leased for one run of an item.
type Credential struct {
	// ID names the credential in the pool; safe to log.
	ID string
	// URL is the key's own base URL (pool.credentials[].url), for a
	// provider kind: its requests go there instead of the kind's base.
	// "" for none.
	URL string
	// Secret is the credential's secret. It prints as [REDACTED]; handlers
	// call Reveal only where they hand it to the job.
	Secret secret.Secret
}

// Output is what a job produced: exec's stdout or http's response body,
// bounded by the handler's MaxOutput.
type Output struct {
	// Body holds at most MaxOutput bytes of the output.
	Body []byte
	// Truncated reports that the job produced more than Body holds.
	Truncated bool
	// Cost is what the run really cost, as the job reported it (exec's
	// "Cost: <n>" stderr line, http's cost_from); 0 when it did not.
	// CostNote says why a figure the job was to report is missing.
	Cost     int64
	CostNote string
	// Rest asks the credential to rest this long after a run that
	// succeeded (exec's "Retry-After:" stderr line on exit 0); RestFrom
	// names where it came from.
	Rest     time.Duration
	RestFrom string
	// Signals are what the API said about the key's remaining room (http:
	// its rate-limit headers).
	Signals []Signal
	// Status is the HTTP status of the API's reply (http kinds; 0 when
	// none came), RequestID the API's ID of the request (from the reply's
	// headers). Set with an error too, and then Body holds the API's
	// error reply.
	Status    int
	RequestID string
	// Usage is what the reply says the run used, in tokens (provider
	// kinds); nil when it does not say.
	Usage *provider.Usage
	// Sent is when the run's request left, as near as the handler knows
	// (http: when it was written; exec: when its process started, which
	// no request of it can precede), zero when unknown or none left. The
	// pool counts the start from then (creds.Outcome.Sent). Set with an
	// error too.
	Sent time.Time
}

// MaxOutputDefault is the default bound on Output.Body (64 KiB): the
// default of jobs.max_output.
const MaxOutputDefault = 64 << 10
