package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Defaults and bounds of Options.
const (
	// DefaultMaxEnqueueBody is the default Options.MaxEnqueueBody: 256 MiB.
	DefaultMaxEnqueueBody = 256 << 20
	// DefaultWriteTimeout is the default Options.WriteTimeout.
	DefaultWriteTimeout = time.Minute
	// MinTokenLen is the shortest admin token accepted.
	MinTokenLen = 16
)

// Options configure an API.
type Options struct {
	// Queue and Pool are what the actions act on; required.
	Queue *queue.Queue
	Pool  *creds.Pool
	// AdminToken enables the writes (and the results), each of which must
	// carry it as "Authorization: Bearer <token>". Empty (the default):
	// read-only. At least MinTokenLen bytes.
	AdminToken string
	// Enqueue is how POST /api/batches reads items (the configuration's
	// defaults, as `producer enqueue` reads them).
	Enqueue EnqueueDefaults
	// MaxEnqueueBody bounds the body of POST /api/batches (default
	// DefaultMaxEnqueueBody); a larger one is refused (413).
	MaxEnqueueBody int64
	// Batches gives the batch objects and hears of each change (default:
	// ReadBatches(Queue)).
	Batches Batches
	// Tenants are the configuration's tenants: GET /api/tenants shows
	// them, with Enqueue.Ledger, and POST /api/tenants/{name}/budget
	// changes the live budget of one of them.
	Tenants []status.TenantSpec
	// Scrubber scrubs every error text an answer holds (default: one that
	// scrubs the admin token).
	Scrubber *secret.Scrubber
	// WriteTimeout is how long each write of a results stream has to go
	// out (default DefaultWriteTimeout): a stream goes on while its client
	// reads it.
	WriteTimeout time.Duration
	// Logger (default: none).
	Logger *zap.Logger
}

// EnqueueDefaults are what an enqueue over HTTP takes from the
// configuration.
type EnqueueDefaults struct {
	// DefaultKind is the kind of items enqueued without ?kind=; "" with
	// Kinds set (the configuration's kinds: several, or none) makes kind=
	// required, the answer naming them; "" without Kinds is
	// jobs.DefaultKind.
	DefaultKind string
	Kinds       []string
	// NamedKinds are the configuration's named kinds (jobs.kinds): a kind
	// an enqueue may name besides the built-in ones.
	NamedKinds []string
	// CostField and CostDefault: pool.cost; ScopeField: pool.scope.field.
	CostField   string
	CostDefault int64
	ScopeField  string
	// Providers are the providers of the kinds that name one, by kind
	// (jobs.kinds.<k>.http.provider): their items are requests; Endpoints
	// where those requests go (http.endpoint, else the provider's).
	Providers, Endpoints map[string]string
	// Tenants are the configuration's tenants (nil: any name); Ledger
	// keeps the batches' budgets (nil: budget= is refused).
	Tenants []string
	Ledger  *spend.Ledger
	// BudgetedTenants are the tenants with a budget (enqueue.Request's).
	BudgetedTenants []string
	// TempDir is where a body is copied while it is enqueued ("":
	// os.TempDir()).
	TempDir string
}

// Batches is where the API reads the batch objects it answers, and what
// it tells of each change it makes. The dashboard's collector is one (its
// counts follow the results, so a program that polls a batch costs
// nothing); ReadBatches reads each batch once.
type Batches interface {
	// Batch returns batch id's object; rec is its record, read now (nil:
	// it has none). An error of class ops.ErrNotFound: the batch has
	// neither a record nor results.
	Batch(ctx context.Context, id string, rec *kftype.BatchInfo) (batchview.Batch, error)
	// Changed says a write changed the fleet; rec is a batch's record it
	// wrote (nil: none).
	Changed(rec *kftype.BatchInfo)
}

// ReadBatches is Batches that reads each batch from its record and
// results (batchview.Read) and hears of nothing: for a server without a
// collector.
func ReadBatches(q *queue.Queue) Batches { return readBatches{q} }

type readBatches struct{ q *queue.Queue }

func (b readBatches) Batch(ctx context.Context, id string, _ *kftype.BatchInfo) (batchview.Batch, error) {
	return batchview.Read(ctx, b.q, id)
}

func (readBatches) Changed(*kftype.BatchInfo) {}

// API serves the routes of the package comment.
type API struct {
	q            *queue.Queue
	pool         *creds.Pool
	token        string
	enq          EnqueueDefaults
	maxBody      int64
	batches      Batches
	tenants      []status.TenantSpec
	scrubber     *secret.Scrubber
	writeTimeout time.Duration
	log          *zap.Logger
}

// New checks the options and builds an API; Register mounts it.
func New(o Options) (*API, error) {
	switch {
	case o.Queue == nil || o.Pool == nil:
		return nil, errors.New("api: Options.Queue and Options.Pool are required")
	case o.AdminToken != "" && len(o.AdminToken) < MinTokenLen:
		return nil, fmt.Errorf("api: the admin token is %d bytes long, want at least %d", len(o.AdminToken), MinTokenLen)
	case o.MaxEnqueueBody < 0 || o.WriteTimeout < 0:
		return nil, errors.New("api: MaxEnqueueBody and WriteTimeout cannot be negative")
	}
	if o.MaxEnqueueBody == 0 {
		o.MaxEnqueueBody = DefaultMaxEnqueueBody
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Enqueue.DefaultKind == "" && o.Enqueue.Kinds == nil {
		o.Enqueue.DefaultKind = jobs.DefaultKind // nothing is known of the configuration's kinds
	}
	if o.Batches == nil {
		o.Batches = ReadBatches(o.Queue)
	}
	if o.Scrubber == nil {
		o.Scrubber = secret.NewScrubber(secret.New(o.AdminToken))
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &API{q: o.Queue, pool: o.Pool, token: o.AdminToken, enq: o.Enqueue, maxBody: o.MaxEnqueueBody, batches: o.Batches,
		tenants: o.Tenants, scrubber: o.Scrubber, writeTimeout: o.WriteTimeout, log: o.Logger}, nil
}

// Register mounts the API's routes on mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/batches", a.enqueueBatch)
	mux.HandleFunc("GET /api/batches/{id}", a.serveBatch)
	mux.HandleFunc("GET /api/batches/{id}/results", a.serveResults)
	mux.HandleFunc("GET /api/batches/{id}/items/{item...}", a.serveItem)
	for _, action := range []string{kftype.ActionPause, kftype.ActionResume, kftype.ActionCancel} {
		mux.HandleFunc("POST /api/batches/{id}/"+action, a.steerBatch(action))
	}
	mux.Handle("POST /api/creds/enable", a.write(a.enableCredential))
	mux.Handle("POST /api/creds/disable", a.write(a.disableCredential))
	mux.Handle("POST /api/dlq/replay", a.write(a.replayDeadLetters))
	mux.HandleFunc("GET /api/tenants", a.serveTenants)
	mux.Handle("POST /api/tenants/{name}/budget", a.write(a.setTenantBudget))
}

func (a *API) scrub(text string) string { return a.scrubber.String(text) }
