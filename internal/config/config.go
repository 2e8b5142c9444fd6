// Package config loads keyfleet's YAML configuration into a validated Config.
//
// Where the configuration comes from (Load):
//
//   - the path given (the --config flag), else the file named by
//     KEYFLEET_CONFIG, else ./keyfleet.yaml, else
//     $XDG_CONFIG_HOME/keyfleet/config.yaml (~/.config/keyfleet/config.yaml),
//     else the built-in defaults for a local NATS and Redis (Find);
//   - then KEYFLEET_NATS_URL and KEYFLEET_REDIS_URL override the file;
//   - callers apply their flags afterwards and call Validate again.
//
// Decoding is strict: an unknown key, a value of the wrong type, a key set
// twice or a second YAML document is an error. Every error line names the
// file, the line and the key path, decoding and validation alike
// ("config: /etc/kf.yaml: line 12: unknown key "pool.credentials[0].secret_envv"
// (did you mean "secret_env"?)", "config: /etc/kf.yaml: line 14:
// pool.credentials[0].max_concurrent: must be at least 1, got 0"), and all
// problems are reported at once, joined with errors.Join.
//
// Adding a key is adding a field: a struct field with its yaml tag and a
// doc comment that says its default, the default in Default (or in the
// section type's WithDefaults, for list items and optional sections), its
// rule in validate.go when it has one, and its entry in
// config/reference.yaml (a test checks the reference covers every key).
//
// A Config never holds a secret: credentials name an environment variable or
// a file, and ResolveSecrets reads them into secret.Secret values, so
// printing a Config (even with %+v) cannot leak one. Error messages never
// echo secret values, nor the user:password part of a URL.
//
// config/reference.yaml at the repository root documents every key with its
// default; a test keeps it in step with these types.
package config

import (
	"cmp"
	"reflect"
	"slices"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Environment variables read by Load.
const (
	// EnvConfig names the config file when Load is given no path.
	EnvConfig = "KEYFLEET_CONFIG"
	// EnvNATSURL, when set, overrides nats.url.
	EnvNATSURL = "KEYFLEET_NATS_URL"
	// EnvRedisURL, when set, overrides redis.url.
	EnvRedisURL = "KEYFLEET_REDIS_URL"
)

// DefaultsSource is Config.Source when no file was read.
const DefaultsSource = "built-in defaults"

// Config is keyfleet's configuration. Default returns it with every default
// filled in; Load reads it from a YAML file. The yaml tags are the keys of
// the file.
type Config struct {
	// NATS is how to reach the NATS server that holds the work queue.
	NATS NATS `yaml:"nats"`
	// Redis is how to reach the Redis that holds the credential pool.
	Redis Redis `yaml:"redis"`
	// Pool is the shared credential pool.
	Pool Pool `yaml:"pool"`
	// Worker tunes the worker daemon.
	Worker Worker `yaml:"worker"`
	// Queue names and tunes the JetStream stream and consumer.
	Queue Queue `yaml:"queue"`
	// Jobs configures the job kinds.
	Jobs Jobs `yaml:"jobs"`
	// Tenants are the teams that share the fleet, by name: a batch
	// enqueued with --tenant T belongs to T. Tenants share the keys by
	// weight before their batches do (priority still comes first), and a
	// tenant's budget bounds all its batches together. Default none.
	Tenants map[string]Tenant `yaml:"tenants"`
	// Gateway serves the providers' own HTTP APIs on the pool's keys,
	// ahead of every batch (gateway.go). Default: off.
	Gateway Gateway `yaml:"gateway"`
	// Log configures logging.
	Log Log `yaml:"log"`

	// Source is where the config came from: the file path, or
	// DefaultsSource. Error messages start with it. Not a YAML key.
	Source string `yaml:"-"`
}

// NATS is the connection to NATS.
type NATS struct {
	// URL of the NATS server; several servers of one cluster may be listed,
	// comma separated. Schemes: nats, tls, ws, wss. A user:password@ or
	// token@ part is allowed. Default "nats://127.0.0.1:4222".
	URL string `yaml:"url"`
	// CredentialsFile is a NATS .creds file (user JWT and NKey seed).
	// Default "" (none).
	CredentialsFile string `yaml:"credentials_file"`
	// TLS configures TLS to the server. Default: none set.
	TLS TLS `yaml:"tls"`
	// ConnectTimeout bounds each connection attempt. Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// StartupTimeout is how long the worker and the producer keep trying
	// to set up the queue while JetStream is not ready yet (a cluster
	// forming or electing leaders, no suitable peers, JetStream still
	// starting, requests unanswered), with exponential backoff; then they
	// exit with the last error (exit code 3). Other errors end them at once.
	// 0: one attempt. Default 60s.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
}

// TLS holds TLS client settings. The zero value means the defaults of the
// client library and the system's root CAs.
type TLS struct {
	// CAFile is a PEM bundle of CAs to trust instead of the system's.
	// Default "".
	CAFile string `yaml:"ca_file"`
	// CertFile is a PEM client certificate, for mutual TLS; it needs KeyFile.
	// Default "".
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile. Default "".
	KeyFile string `yaml:"key_file"`
	// InsecureSkipVerify turns off verification of the server's
	// certificate. For tests only. Default false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// IsZero reports whether no TLS setting is made.
func (t TLS) IsZero() bool { return t == TLS{} }

// Redis is the connection to Redis.
type Redis struct {
	// URL of Redis: redis://[user:password@]host:port/db, rediss:// for TLS,
	// or unix:///path/to/socket. With Cluster, the host part lists seed
	// nodes, comma separated (redis://h1:7000,h2:7001). Default
	// "redis://127.0.0.1:6379/0".
	URL string `yaml:"url"`
	// TLS configures TLS; it needs a rediss:// URL. Default: none set.
	TLS TLS `yaml:"tls"`
	// Cluster selects the Redis Cluster client. Default false.
	Cluster bool `yaml:"cluster"`
}

// Pool is the credential pool shared by every worker.
type Pool struct {
	// Name of the pool; every Redis key of the pool carries it as its hash
	// tag. Letters, digits, '_', '.', '-'. Default "default".
	Name string `yaml:"name"`
	// LeaseTTL is how long a lease lives unless renewed; a crashed worker's
	// leases come back after it. At least 1s. Default 30s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Cooldown is how long a credential rests after a rate limit that gave
	// no Retry-After. Default 60s.
	Cooldown time.Duration `yaml:"cooldown"`
	// MaxRest caps every rest a reply asks for (Retry-After in any form,
	// retry-after-ms, rate-limit resets, an exec job's Retry-After): a
	// longer one is cut to it, with a warning naming the header. At least
	// 1s. Default 24h.
	MaxRest time.Duration `yaml:"max_rest"`
	// ProbeInterval, when set, makes the workers probe every key the API
	// disabled (never one an operator disabled) this often, fleet-wide
	// once per key, with the probe of a job kind (jobs.http.probe_url,
	// jobs.exec.probe_command); a key that passes is enabled again. At
	// least 1s. Default 0 (off).
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// Accounts are what the APIs limit, rather than a key: an OpenAI
	// organization or project, an Anthropic workspace, an Azure OpenAI
	// resource. A credential names its account; every credential of an
	// account (and of the accounts inside it) draws on its limits, and a
	// reply to one of them paces all of them. Default none (each key is
	// an account of its own).
	Accounts []Account `yaml:"accounts"`
	// Credentials are the pool's credentials. Default none.
	Credentials []Credential `yaml:"credentials"`
	// Cost says where an item's estimated cost comes from, for the
	// credentials' cost limits.
	Cost Cost `yaml:"cost"`
	// Scope says where an item's scope comes from (its model, say): a
	// limit with `scope: S` binds only items whose scope is S. Default:
	// none (no item has a scope; scoped limits are an error).
	Scope Scope `yaml:"scope"`
	// Prices are the models' prices (a model is an item's scope), per
	// 1,000,000 tokens, in any currency: a run's spend is its reply's
	// input tokens times the input price plus its output tokens times the
	// output price. Default none (runs have no spend; a budget cannot be
	// set on a batch whose models have no price).
	Prices map[string]spend.Price `yaml:"prices"`
	// BatchAPIDiscount is the share of the price a request pays through a
	// provider's Batch API (above 0, at most 1). Default 0.5.
	BatchAPIDiscount float64 `yaml:"batch_api_discount"`
}

// Account is one account of the pool (creds.Account).
type Account struct {
	// ID names the account; letters, digits, '_', '.', ':', '@', '-', and
	// no credential has it as its ID. Required.
	ID string `yaml:"id"`
	// Limits are the account's limits, written as a credential's. Default
	// none: the account only shares what its keys' replies say.
	Limits []creds.Limit `yaml:"limits"`
	// Account is the enclosing account, whose limits bind this one's keys
	// too (an OpenAI project inside its organization). Default "" (none).
	Account string `yaml:"account"`
}

// PoolAccounts are the pool's accounts as pkg/creds takes them.
func (p Pool) PoolAccounts() []creds.Account {
	out := make([]creds.Account, 0, len(p.Accounts))
	for _, a := range p.Accounts {
		out = append(out, creds.Account{ID: a.ID, Account: a.Account, Limits: a.Limits})
	}
	return out
}

// Tenant is a team sharing the fleet.
type Tenant struct {
	// Weight is the tenant's share of the keys among the tenants of a
	// priority (1 to 1000). Default 1.
	Weight int `yaml:"weight"`
	// Budget bounds what all the tenant's batches spend together in a
	// UTC calendar period, written AMOUNT/PERIOD (period d, w or mo:
	// 100/d, 500/w, 2000/mo); its batches pause with the reason
	// tenant-budget until the next period. Default "" (none).
	Budget string `yaml:"budget"`
}

// TenantWeightDefault is a tenant's weight when its config says none.
const TenantWeightDefault = 1

// WithDefaults fills the zero settings with their defaults; the decoder
// starts each tenant of a file from it.
func (t Tenant) WithDefaults() Tenant {
	t.Weight = cmp.Or(t.Weight, TenantWeightDefault)
	return t
}

// BudgetedTenants are the names of the tenants with a budget, sorted.
func (c *Config) BudgetedTenants() []string {
	var out []string
	for name := range c.Tenants {
		if _, ok := c.TenantBudget(name); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TenantWeight is tenant's weight: its tenants.<t>.weight, else
// TenantWeightDefault (no tenant, or one the configuration does not name).
func (c *Config) TenantWeight(tenant string) int {
	if t, ok := c.Tenants[tenant]; ok && t.Weight > 0 {
		return t.Weight
	}
	return TenantWeightDefault
}

// TenantBudget is tenant's budget, and whether it has one (a tenant the
// configuration does not name has none).
func (c *Config) TenantBudget(tenant string) (spend.Budget, bool) {
	t, ok := c.Tenants[tenant]
	if !ok || t.Budget == "" {
		return spend.Budget{}, false
	}
	b, err := spend.ParseBudget(t.Budget)
	return b, err == nil
}

// BatchAPIDiscountDefault is the default of pool.batch_api_discount.
const BatchAPIDiscountDefault = 0.5

// Scope says how an item's scope is read.
type Scope struct {
	// Field is the item's top-level field holding its scope, a string
	// (creds.ValidScope); an item without it has none. Default "" (off).
	Field string `yaml:"field"`
}

// Cost says how much of a cost limit (tokens, credits, rows) an item
// takes before it runs; the job's reported cost replaces it afterwards.
type Cost struct {
	// Field is the item's top-level field holding its estimated cost (a
	// number; fractions round up). Default "cost".
	Field string `yaml:"field"`
	// Default is the cost of an item without that field. At least 1.
	// Default 1.
	Default int64 `yaml:"default"`
}

// MaxRestDefault is the default of pool.max_rest; MaxRateLimitedDefault of
// worker.max_rate_limited.
const (
	MaxRestDefault        = 24 * time.Hour
	MaxRateLimitedDefault = 20
)

// Defaults of pool.cost.
const (
	CostFieldDefault = "cost"
	CostDefault      = 1
)

// Credential is one API credential. Its secret stays on the worker: it is
// read from SecretEnv or SecretFile by Config.ResolveSecrets.
type Credential struct {
	// ID names the credential in Redis, NATS, logs and metrics. Required;
	// letters, digits, '_', '.', ':', '@', '-'.
	ID string `yaml:"id"`
	// SecretEnv is the environment variable holding the secret. Exactly one
	// of SecretEnv and SecretFile is set.
	SecretEnv string `yaml:"secret_env"`
	// SecretFile is a file holding the secret (one trailing newline is
	// dropped), such as /run/secrets/key-a. A relative path is relative to
	// the worker's working directory.
	SecretFile string `yaml:"secret_file"`
	// MaxConcurrent is how many jobs may hold the credential at once.
	// Default 1.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Rate is the optional rate, N/PERIOD as ratelimit.ParseLimit reads
	// it: "60/m" is at most 60 starts in any 60 s window; short for
	// limits: [{rate: 60/m}]. Default: the zero Limit (none; "" in the
	// file).
	Rate ratelimit.Limit `yaml:"rate"`
	// Limits are more limits of the credential; a start needs room in
	// every one that applies to it (unscoped, or of its scope). The file
	// writes each as {rate: N/P} (at most N starts in any window P,
	// exact), {rate: N/P, burst: B} (smooth: at most B back to back, then
	// one every P/N), or {cost: N/P} (at most N cost units in any window
	// P, exact), each with an optional scope: S (it binds only items of
	// scope S; needs pool.scope.field). The decoder reads each straight
	// into a creds.Limit (decodeLimit). Default none.
	Limits []creds.Limit `yaml:"limits"`
	// Groups are the key groups the credential is in, which a kind's
	// `credentials` may name; each a creds.ValidID. Default none.
	Groups []string `yaml:"groups"`
	// Account is the pool account the credential belongs to (one of
	// pool.accounts): its limits bind the credential's starts as well as
	// its own, and what the API says on a reply to it paces every key of
	// the account. Default "" (the credential is an account of its own).
	Account string `yaml:"account"`
	// URL is the key's own base URL, for provider kinds (an Azure
	// resource, a regional endpoint): their requests on this key go there
	// instead of the kind's base. http or https. Default "" (the kind's).
	URL string `yaml:"url"`
}

// PoolLimits is every limit of the credential as the pool takes them:
// Rate (as a creds.LimitWindow) first, then Limits.
func (c Credential) PoolLimits() []creds.Limit {
	var out []creds.Limit
	if !c.Rate.IsZero() {
		out = append(out, creds.RateLimit(c.Rate))
	}
	return append(out, c.Limits...)
}

// namedBy reports whether name, in a kind's `credentials`, names the
// credential: its ID or one of its groups.
func (c Credential) namedBy(name string) bool {
	return c.ID == name || slices.Contains(c.Groups, name)
}

// maxConcurrentDefault is the default of a credential's max_concurrent.
const maxConcurrentDefault = creds.MaxConcurrentDefault

// WithDefaults fills the zero settings with their defaults; the decoder
// starts each credential of a file from it.
func (c Credential) WithDefaults() Credential {
	c.MaxConcurrent = cmp.Or(c.MaxConcurrent, maxConcurrentDefault)
	return c
}

// Worker tunes the worker daemon.
type Worker struct {
	// Concurrency is how many items one worker process runs at once.
	// Default 3.
	Concurrency int `yaml:"concurrency"`
	// ShutdownGrace is how long in-flight items may run on after the first
	// SIGINT/SIGTERM before they are cancelled and handed back. Default 20s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// MaxAttempts bounds the failed runs (transient or timed out) of an
	// item; then it is dead-lettered. Default 5.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxRateLimited bounds the rate-limited runs of an item in a row (they
	// use no attempt); then it is dead-lettered with the last reason.
	// Default 20.
	MaxRateLimited int `yaml:"max_rate_limited"`
	// RetryBackoff is the wait before the next run after the n-th failure;
	// the last entry repeats (see RetryDelay). Default [1s, 5s, 30s, 2m].
	RetryBackoff []time.Duration `yaml:"retry_backoff"`
	// Listen is the address of /metrics, /healthz and /readyz, such as
	// "127.0.0.1:9464". Default "" (no listener).
	Listen string `yaml:"listen"`
	// Heartbeat is how often a worker announces itself. Default 5s.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// PProf adds Go's profiler (/debug/pprof/: CPU profiles, execution
	// traces, heap and goroutine dumps) to the Listen address. Whoever
	// reaches that address can then run profiles, so keep it off where
	// metrics are scraped from outside. Default false.
	PProf bool `yaml:"pprof"`
}

// RetryDelay returns the wait before the next run of an item that has
// failed `failures` times: RetryBackoff[failures-1], the last entry
// repeating. It returns 0 for failures < 1 or an empty RetryBackoff.
func (w Worker) RetryDelay(failures int) time.Duration {
	if failures < 1 || len(w.RetryBackoff) == 0 {
		return 0
	}
	return w.RetryBackoff[min(failures, len(w.RetryBackoff))-1]
}

// Queue names and tunes the JetStream work queue.
type Queue struct {
	// Stream is the JetStream stream holding the work items. Default
	// "KEYFLEET".
	Stream string `yaml:"stream"`
	// SubjectPrefix: a batch's items are published on
	// <prefix>.b.<batch>.<kind>[.<scope>] (its lanes). Default
	// "keyfleet.items".
	SubjectPrefix string `yaml:"subject_prefix"`
	// Consumer names the workers' durable pull consumers, one per lane of
	// a batch: <consumer>-b-<16 hex digits>. Default "keyfleet-workers".
	Consumer string `yaml:"consumer"`
	// AckWait is how long a delivered item may go without an ack or an
	// in-progress ack before JetStream redelivers it. At least 1s. Default
	// 30s.
	AckWait time.Duration `yaml:"ack_wait"`
	// MaxDeliver bounds deliveries of one message: -1 (the default) is
	// unlimited; attempts are bounded by Worker.MaxAttempts instead. Any
	// other value must be at least Worker.MaxAttempts.
	MaxDeliver int `yaml:"max_deliver"`
	// RedeliveryBackoff is the consumer's BackOff: waits before redeliveries
	// after an ack-wait expiry. JetStream uses its first entry as the ack
	// wait, so that entry must equal AckWait. Default none.
	RedeliveryBackoff []time.Duration `yaml:"redelivery_backoff"`
	// DuplicateWindow is the JetStream dedupe window: enqueueing an item of
	// a batch again inside it adds nothing. Default 2h.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// Replicas of the stream (1 to 5; more than 1 needs a NATS cluster).
	// Default 1.
	Replicas int `yaml:"replicas"`
	// Storage of the stream: "file" or "memory". Default "file".
	Storage string `yaml:"storage"`
	// ResultsMaxAge is how long results and dead letters are kept.
	// Default 168h.
	ResultsMaxAge time.Duration `yaml:"results_max_age"`
}

// QueueConfig maps the configuration onto the queue's settings; workers
// and the producer share it so that they agree on every stream and
// consumer setting.
func (c *Config) QueueConfig() queue.Config {
	q := c.Queue
	return queue.Config{
		Stream: q.Stream, SubjectPrefix: q.SubjectPrefix, Consumer: q.Consumer,
		AckWait: q.AckWait, MaxDeliver: q.MaxDeliver, RedeliveryBackoff: q.RedeliveryBackoff,
		DuplicateWindow: q.DuplicateWindow, Replicas: q.Replicas, Memory: q.Storage == "memory",
		ResultsMaxAge: q.ResultsMaxAge, HeartbeatTTL: max(queue.HeartbeatTTLDefault, 3*c.Worker.Heartbeat),
	}
}

// Jobs configures the job kinds (jobs.Kinds). A kind with settings has a
// section here, a pointer field whose yaml key is the kind's name, and runs
// only when its section is configured; the sleep kind has none and always
// runs.
type Jobs struct {
	// MaxOutput bounds a job's captured output (exec stdout, http body), in
	// bytes; YAML takes a number of bytes or a KiB, MiB or GiB suffix.
	// Default jobs.MaxOutputDefault (64KiB).
	MaxOutput int `yaml:"max_output" config:"size"`
	// Exec configures the exec kind; nil (the default) means not
	// configured.
	Exec *ExecJob `yaml:"exec"`
	// HTTP configures the http kind; nil (the default) means not
	// configured.
	HTTP *HTTPJob `yaml:"http"`
	// Kinds are named kinds of work: items enqueued with --kind <name>
	// run as the kind says, on the keys it may use. Default none.
	Kinds map[string]Kind `yaml:"kinds"`
	// BatchAPI tunes the batches enqueued with a deadline, which run
	// through the providers' Batch APIs (docs/batch-api.md).
	BatchAPI BatchAPI `yaml:"batch_api"`
}

// BatchAPI tunes the deadline batches run through a provider's Batch API
// (OpenAI Batch, Anthropic Message Batches).
type BatchAPI struct {
	// Poll is how often a provider batch's status is read. Default
	// BatchAPIPollDefault (1m).
	Poll time.Duration `yaml:"poll"`
	// Margin: an item not back from its provider batch by the batch's
	// deadline less Margin runs in real time (the provider batch is
	// cancelled first, and what it finished kept). Default
	// BatchAPIMarginDefault (1h).
	Margin time.Duration `yaml:"margin"`
}

// Defaults of BatchAPI.
const (
	BatchAPIPollDefault   = time.Minute
	BatchAPIMarginDefault = time.Hour
)

// Kind is a named kind of work: exactly one of HTTP and Exec, and the
// keys it may use. Its name is a queue.CheckKindName and no built-in
// kind's. Its section is checked as jobs.http's or jobs.exec's; its probe
// (probe_url, probe_command, a provider's) probes the keys it may use.
type Kind struct {
	// HTTP: one request per item, as jobs.http.
	HTTP *HTTPJob `yaml:"http"`
	// Exec: one run of a command per item (or a persistent handler), as
	// jobs.exec.
	Exec *ExecJob `yaml:"exec"`
	// Credentials are the key groups or credential IDs the kind's items
	// may use (Config.KindKeys). Default: every key of the pool.
	Credentials []string `yaml:"credentials"`
	// Fallback is where the kind's items run when its own keys cannot
	// serve them (fallback.go). Default: nil, nowhere else.
	Fallback *Fallback `yaml:"fallback"`
}

// section returns the built-in kind that runs the kind's items (http or
// exec) and its settings; ok is false unless exactly one of HTTP and Exec
// is set.
func (k Kind) section() (base jobs.Kind, sec jobs.Section, ok bool) {
	var name string
	switch {
	case k.HTTP != nil && k.Exec == nil:
		name, sec = jobs.KindHTTP, k.HTTP
	case k.Exec != nil && k.HTTP == nil:
		name, sec = jobs.KindExec, k.Exec
	default:
		return jobs.Kind{}, nil, false
	}
	base, ok = jobs.Lookup(name)
	return base, sec, ok
}

// KindNames returns the names of the named kinds (jobs.kinds), sorted.
// The built-in kinds (jobs.Kinds) are not among them.
func (j Jobs) KindNames() []string {
	names := make([]string, 0, len(j.Kinds))
	for name := range j.Kinds {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// KindSection says how items of kind name run: the built-in kind that
// runs them (for a named kind, http or exec, whichever its section is),
// that kind's settings (nil for a kind that takes none, such as sleep),
// and whether name is a configured kind (Section's rule for a built-in
// kind; a named kind always is). A worker builds the handler of name
// with base.New(sec, common).
func (j Jobs) KindSection(name string) (base jobs.Kind, sec jobs.Section, ok bool) {
	if k, named := j.Kinds[name]; named {
		return k.section()
	}
	if base, ok = jobs.Lookup(name); !ok {
		return jobs.Kind{}, nil, false
	}
	if sec, ok = j.Section(name); !ok {
		return jobs.Kind{}, nil, false
	}
	return base, sec, true
}

// KindProvider returns the provider a kind speaks (http: {provider: ...}),
// "" for none: a kind without http settings, or one that names no
// provider.
func (j Jobs) KindProvider(kind string) string {
	_, sec, ok := j.KindSection(kind)
	if !ok {
		return ""
	}
	if h, isHTTP := sec.(*HTTPJob); isHTTP && h != nil {
		return h.Provider
	}
	return ""
}

// KindEndpoint returns the endpoint a provider kind's requests go to (its
// http.endpoint, else its provider's), "" for a kind without a provider.
func (j Jobs) KindEndpoint(kind string) string {
	_, sec, ok := j.KindSection(kind)
	if !ok {
		return ""
	}
	h, isHTTP := sec.(*HTTPJob)
	if !isHTTP || h == nil {
		return ""
	}
	spec, ok := provider.Lookup(h.Provider)
	if !ok {
		return ""
	}
	return cmp.Or(h.Endpoint, spec.Endpoint)
}

// KindTimeout returns how long one run of a kind may take (its http or
// exec section's timeout), 0 for a kind without one.
func (j Jobs) KindTimeout(kind string) time.Duration {
	_, sec, ok := j.KindSection(kind)
	if !ok {
		return 0
	}
	switch s := sec.(type) {
	case *HTTPJob:
		if s != nil {
			return s.Timeout
		}
	case *ExecJob:
		if s != nil {
			return s.Timeout
		}
	}
	return 0
}

// HasProvider reports whether a configured kind names a provider (its
// items are scoped by their model).
func (j Jobs) HasProvider() bool {
	for _, name := range append(j.KindNames(), jobs.KindHTTP) {
		if j.KindProvider(name) != "" {
			return true
		}
	}
	return false
}

// KindKeys returns the IDs of the credentials that items of kind may use,
// sorted, each once: those whose ID or one of whose groups the kind's
// `credentials` names. Nil means every key of the pool: a built-in kind,
// a named kind without `credentials`, or a kind the configuration does
// not define.
func (c *Config) KindKeys(kind string) []string {
	k, ok := c.Jobs.Kinds[kind]
	if !ok || k.Credentials == nil {
		return nil
	}
	var ids []string
	for _, cr := range c.Pool.Credentials {
		if slices.ContainsFunc(k.Credentials, cr.namedBy) {
			ids = append(ids, cr.ID)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if ids == nil {
		ids = []string{} // names no key: no key, not every key
	}
	return ids
}

// Section returns the settings section of the job kind called name and
// whether the kind is configured: a kind that takes no settings always is,
// a kind with a section when its section is set.
func (j Jobs) Section(name string) (jobs.Section, bool) {
	k, ok := jobs.Lookup(name)
	if !ok {
		return nil, false
	}
	if k.Section == nil {
		return nil, true
	}
	f, ok := yamlFields(reflect.TypeFor[Jobs]())[name]
	if !ok {
		return nil, false // TestJobSections keeps every kind's section here
	}
	v := reflect.ValueOf(j).FieldByIndex(f.Index)
	if v.IsNil() {
		return nil, false
	}
	sec, ok := v.Interface().(jobs.Section)
	return sec, ok
}

// ProbeSections returns the section of every configured kind, built-in
// or named, that has a probe (jobs.Probing), by kind name. A kind's probe
// probes the keys the kind may use (Config.KindKeys).
func (j Jobs) ProbeSections() map[string]jobs.Probing {
	out := map[string]jobs.Probing{}
	names := j.KindNames()
	for _, k := range jobs.Kinds() {
		names = append(names, k.Name)
	}
	for _, name := range names {
		if _, sec, ok := j.KindSection(name); ok {
			if p, ok := sec.(jobs.Probing); ok && p.HasProbe() {
				out[name] = p
			}
		}
	}
	return out
}

// HasProbe reports whether a configured kind has a probe.
func (j Jobs) HasProbe() bool { return len(j.ProbeSections()) > 0 }

// ExecJob configures the exec kind: one run of a command per item. The
// section is the exec kind's own settings type; see jobs.ExecConfig for
// its keys and defaults.
type ExecJob = jobs.ExecConfig

// HTTPJob configures the http kind: one request per item. The section is
// the http kind's own settings type; see jobs.HTTPConfig for its keys and
// defaults.
type HTTPJob = jobs.HTTPConfig

// Log configures logging.
type Log struct {
	// Level is the least severe level logged: debug, info, warn or error.
	// Default "info".
	Level string `yaml:"level"`
	// Format is auto (console on a terminal, JSON otherwise), json or
	// console. Default "auto".
	Format string `yaml:"format"`
}

// Default returns the built-in configuration: a local NATS and Redis, no
// credentials, no exec or http job kind. Source is DefaultsSource.
func Default() *Config {
	return &Config{
		NATS: NATS{
			URL:            "nats://127.0.0.1:4222",
			ConnectTimeout: 5 * time.Second,
			StartupTimeout: 60 * time.Second,
		},
		Redis: Redis{URL: "redis://127.0.0.1:6379/0"},
		Pool: Pool{
			Name:     "default",
			LeaseTTL: creds.LeaseTTLDefault,
			Cooldown: 60 * time.Second,
			MaxRest:  MaxRestDefault,
			Cost:     Cost{Field: CostFieldDefault, Default: CostDefault},

			BatchAPIDiscount: BatchAPIDiscountDefault,
		},
		Worker: Worker{
			Concurrency:    3,
			ShutdownGrace:  20 * time.Second,
			MaxAttempts:    5,
			MaxRateLimited: MaxRateLimitedDefault,
			RetryBackoff:   []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute},
			Heartbeat:      5 * time.Second,
		},
		Queue: Queue{
			Stream:          queue.StreamDefault,
			SubjectPrefix:   queue.SubjectPrefixDefault,
			Consumer:        queue.ConsumerDefault,
			AckWait:         queue.AckWaitDefault,
			MaxDeliver:      queue.MaxDeliverDefault,
			DuplicateWindow: queue.DuplicateWindowDefault,
			Replicas:        queue.ReplicasDefault,
			Storage:         "file",
			ResultsMaxAge:   queue.ResultsMaxAgeDefault,
		},
		Jobs:    Jobs{MaxOutput: jobs.MaxOutputDefault, BatchAPI: BatchAPI{Poll: BatchAPIPollDefault, Margin: BatchAPIMarginDefault}},
		Gateway: Gateway{MaxWait: GatewayMaxWaitDefault},
		Log:     Log{Level: "info", Format: "auto"},

		Source: DefaultsSource,
	}
}
