package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// HTTPConfig configures the http kind: each item's payload is sent to URL
// with the credential's secret in a header, and the status says what
// happened:
//
//	2xx                        done; the response body is the output
//	429                        rate limited; Retry-After (seconds or an
//	                           HTTP-date) says for how long
//	401, 403                   credential rejected
//	402, or 429 whose body     credential rejected (quota)
//	mentions insufficient_quota
//	429 whose body says the    permanent failure, no rest (TooLarge)
//	request is too large
//	413                        permanent failure
//	other 4xx, 3xx             permanent failure
//	5xx, network errors,       transient failure
//	timeout
//
// Each request carries Content-Type: application/json, the secret header,
// Headers, X-Keyfleet-Item, X-Keyfleet-Batch, X-Keyfleet-Attempt and
// Idempotency-Key: <batch>/<item id>.
type HTTPConfig struct {
	// Provider names the API the kind speaks (provider.Names: openai,
	// anthropic, openai-compatible); "" for none. With a provider, URL is
	// the API's base (default: the provider's; openai-compatible needs
	// it), each request goes to the provider's endpoint (or an OpenAI
	// batch line's url) with the provider's auth and headers and the item's
	// request as its body, a key's own url (pool.credentials[].url)
	// replaces the base, the reply's usage is what the run cost, and
	// probe_url defaults to the base's /v1/models. Default "".
	Provider string `yaml:"provider"`
	// URL receives the requests; http or https. Required without a
	// provider.
	URL string `yaml:"url"`
	// Endpoint is the path a provider kind's requests go to, after URL:
	// one of the provider's (provider.Spec.Endpoints, such as
	// /v1/embeddings). Default: the provider's (/v1/chat/completions,
	// /v1/messages); an OpenAI batch line's url names its own. Only with
	// a provider.
	Endpoint string `yaml:"endpoint"`
	// Method is the request method. Default HTTPMethodDefault ("POST").
	Method string `yaml:"method"`
	// Header names the header that carries the secret. Default
	// HTTPHeaderDefault ("Authorization").
	Header string `yaml:"header"`
	// Format is the Header's value; {secret} is replaced by the secret and
	// must occur. Default HTTPFormatDefault ("Bearer {secret}").
	Format string `yaml:"format"`
	// Headers are added to every request. They may replace Content-Type but
	// not Header or the X-Keyfleet-* and Idempotency-Key headers. Default
	// none.
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request, reading the response included. Default
	// HTTPTimeoutDefault (60s).
	Timeout time.Duration `yaml:"timeout"`
	// CostFrom is where a 2xx reply's JSON body says what the item really
	// cost: a dotted path such as "usage.total_tokens". Its number
	// replaces the estimate in the credential's cost windows. Default ""
	// (none).
	CostFrom string `yaml:"cost_from"`
	// ProbeURL is where a key the API disabled is probed, every
	// pool.probe_interval: a GET with the key in Header (as Format says)
	// and Headers, redirects not followed; a 2xx answer enables the key
	// again. http or https, such as "https://api.example.com/v1/models".
	// Default "" (no probe).
	ProbeURL string `yaml:"probe_url"`

	// The fields below are not keys of the config section: the worker sets
	// them (see Common).

	// MaxOutput bounds Output.Body in bytes. Default MaxOutputDefault.
	MaxOutput int `yaml:"-"`
	// Scrubber removes secrets from response bodies before they are
	// bounded (see ExecConfig.Scrubber). Nil: the run's own secret.
	Scrubber *secret.Scrubber `yaml:"-"`
	// Client sends the requests. Default: a client on
	// http.DefaultTransport that does not follow redirects (a redirect
	// could carry the secret header to another host).
	Client *http.Client `yaml:"-"`
}

// Defaults of HTTPConfig, filled in by WithDefaults.
const (
	HTTPMethodDefault  = http.MethodPost
	HTTPHeaderDefault  = "Authorization"
	HTTPFormatDefault  = "Bearer " + secretPlaceholder
	HTTPTimeoutDefault = 60 * time.Second
)

// WithDefaults fills the zero settings with their defaults (MaxOutput
// too is left to NewHTTP: it is the worker's, not the section's); a
// provider's first (its base URL, auth header, headers and probe).
func (c HTTPConfig) WithDefaults() HTTPConfig {
	if spec, ok := provider.Lookup(c.Provider); ok {
		c.URL = cmp.Or(c.URL, spec.BaseURL)
		// The generic defaults (a section may start from them) give way
		// to the provider's auth.
		if c.Header == "" || c.Header == HTTPHeaderDefault && c.Format == HTTPFormatDefault {
			c.Header, c.Format = spec.AuthHeader, cmp.Or(spec.AuthFormat, c.Format)
		}
		c.Format = cmp.Or(c.Format, spec.AuthFormat)
		if len(spec.Headers) > 0 {
			h := maps.Clone(c.Headers)
			if h == nil {
				h = map[string]string{}
			}
			for name, v := range spec.Headers {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(h)), func(k string) bool { return strings.EqualFold(k, name) }) {
					h[name] = v
				}
			}
			c.Headers = h
		}
		if c.ProbeURL == "" && c.URL != "" {
			c.ProbeURL = provider.URL(c.URL, spec.ProbePath)
		}
	}
	c.Method = cmp.Or(c.Method, HTTPMethodDefault)
	c.Header = cmp.Or(c.Header, HTTPHeaderDefault)
	c.Format = cmp.Or(c.Format, HTTPFormatDefault)
	c.Timeout = cmp.Or(c.Timeout, HTTPTimeoutDefault)
	return c
}

// Check reports every problem of the settings, keyed by their keys in the
// section (jobs.http in the config file). Defaults are not filled in
// first: a zero Timeout or an empty Method is a problem.
func (c *HTTPConfig) Check() check.List {
	var l check.List
	spec, isProvider := provider.Lookup(c.Provider)
	switch {
	case c.Provider != "" && !isProvider:
		l.Add("provider", "%v", provider.Check(c.Provider))
	case c.URL == "" && isProvider && spec.BaseURL == "":
		l.Add("url", "must be set for provider %s: the server's base URL, e.g. http://vllm:8000", c.Provider)
	case c.URL == "" && !isProvider:
		l.Add("url", "must be set, e.g. https://api.example.com/v1/x")
	case c.URL != "":
		checkHTTPURL(&l, "url", c.URL)
		if isProvider {
			checkBaseURL(&l, "url", c.URL, spec)
		}
	}
	switch {
	case c.Endpoint == "":
	case !isProvider:
		l.Add("endpoint", "is a provider's endpoint: set provider too (or put the whole address in url)")
	case !slices.Contains(spec.Endpoints, c.Endpoint):
		l.Add("endpoint", "%s is not one of %s's endpoints (%s)", check.Quote(c.Endpoint), c.Provider, strings.Join(spec.Endpoints, ", "))
	}
	if c.ProbeURL != "" {
		checkHTTPURL(&l, "probe_url", c.ProbeURL)
	}
	if !validToken(c.Method) {
		l.Add("method", "%s is not an HTTP method", check.Quote(c.Method))
	}
	if !validToken(c.Header) {
		l.Add("header", "%s is not a header name", check.Quote(c.Header))
	}
	// Not quoted: a format without {secret} may hold a pasted secret.
	if !strings.Contains(c.Format, secretPlaceholder) {
		l.Add("format", "must contain %s, where the credential's secret goes (e.g. %q)", secretPlaceholder, HTTPFormatDefault)
	} else if !validHeaderValue(c.Format) {
		l.Add("format", "cannot hold a line break, NUL or other control character")
	}
	if c.CostFrom != "" && slices.Contains(strings.Split(c.CostFrom, "."), "") {
		l.Add("cost_from", "%s is not a dotted path into the reply, e.g. usage.total_tokens", check.Quote(c.CostFrom))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		key := "headers." + name
		switch {
		case !validToken(name):
			l.Add(key, "is not a header name")
		case strings.EqualFold(name, c.Header):
			l.Add(key, "clashes with jobs.http.header (%s), which carries the secret", c.Header)
		case slices.ContainsFunc(httpReservedHeaders, func(r string) bool { return strings.EqualFold(name, r) }):
			l.Add(key, "is set by the worker on every request; it cannot be set here")
		}
		if !validHeaderValue(c.Headers[name]) {
			l.Add(key, "the value cannot hold a line break, NUL or other control character")
		}
	}
	l.Positive("timeout", c.Timeout)
	return l
}

// checkBaseURL adds a problem at key when raw, a provider's base URL,
// names an endpoint instead (…/v1/chat/completions): each request's
// endpoint is added to the base.
func checkBaseURL(l *check.List, key, raw string, spec provider.Spec) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	for _, e := range spec.Endpoints {
		if strings.HasSuffix(strings.TrimRight(u.Path, "/"), e) {
			l.Add(key, "%s is an endpoint; with a provider, url is the API's base (such as %s): %s is added to it",
				check.Quote(secret.RedactURL(raw)), cmp.Or(spec.BaseURL, "http://vllm:8000"), e)
			return
		}
	}
}

// checkHTTPURL adds a problem at key unless raw is an absolute http or
// https URL with a host.
func checkHTTPURL(l *check.List, key, raw string) {
	switch u, err := url.Parse(raw); {
	case err != nil:
		l.Add(key, "%s is not a valid URL", check.Quote(secret.RedactURL(raw)))
	case u.Scheme == "":
		l.Add(key, "%s is not an absolute URL; want http://host/... or https://host/...", check.Quote(secret.RedactURL(raw)))
	case u.Scheme != "http" && u.Scheme != "https":
		l.Add(key, "scheme %s is not http or https", check.Quote(u.Scheme))
	case u.Host == "":
		l.Add(key, "%s names no host", check.Quote(secret.RedactURL(raw)))
	}
}

// The headers the http kind sets on every request.
const (
	headerItem        = "X-Keyfleet-Item"
	headerBatch       = "X-Keyfleet-Batch"
	headerAttempt     = "X-Keyfleet-Attempt"
	headerIdempotency = "Idempotency-Key"
	secretPlaceholder = "{secret}"
)

// httpReservedHeaders are set on every request; HTTPConfig.Headers cannot
// set them.
var httpReservedHeaders = []string{headerItem, headerBatch, headerAttempt, headerIdempotency, "Host", "Content-Length"}

const (
	httpErrBodyMax  = ReplyBodyMax // bytes of a non-2xx body read
	httpSnippetMax  = 300          // bytes of it quoted in an error
	httpDrainMax    = 256 << 10    // bytes read past the bound to reuse the connection
	quotaMarker     = "insufficient_quota"
	httpCostBodyMax = 4 << 20 // bytes of a 2xx reply read for cost_from
)

// errHTTPTimeout is the cause of a request's context when Timeout ran out.
var errHTTPTimeout = errors.New("http: timeout")

var noRedirectClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type httpHandler struct {
	cfg     HTTPConfig
	headers http.Header // cfg.Headers, canonical
	limit   int
	client  *http.Client
	// spec is the provider the kind speaks; nil for none.
	spec *provider.Spec
	// clocks reads the times a reply names on its host's clock.
	clocks ServerClocks
}

// NewHTTP returns the http handler, after WithDefaults. Its errors name
// the field at fault.
func NewHTTP(cfg HTTPConfig) (Handler, error) {
	cfg = cfg.WithDefaults()
	if err := checkSettings("http", cfg.Check(), cfg.MaxOutput); err != nil {
		return nil, err
	}
	h := &httpHandler{cfg: cfg, headers: make(http.Header, len(cfg.Headers)), limit: cmp.Or(cfg.MaxOutput, MaxOutputDefault), client: cfg.Client}
	if h.client == nil {
		h.client = noRedirectClient
	}
	h.cfg.Headers = maps.Clone(cfg.Headers)
	for name, value := range cfg.Headers {
		h.headers.Set(name, value)
	}
	if spec, ok := provider.Lookup(cfg.Provider); ok {
		spec.Endpoint = cmp.Or(cfg.Endpoint, spec.Endpoint)
		h.spec = &spec
	}
	return h, nil
}

func (h *httpHandler) Kind() string { return KindHTTP }

// Run sends one item; see HTTPConfig for the mapping of replies.
func (h *httpHandler) Run(ctx context.Context, item Item, cred Credential) (out Output, err error) {
	if ctx.Err() != nil {
		return Output{}, canceledError("http", ctx)
	}
	for _, f := range []struct{ name, v string }{{"item id", item.ID}, {"batch", item.Batch}} {
		if !validHeaderValue(f.v) {
			return Output{}, Permanent(fmt.Errorf("http: %s %q contains control characters and cannot be sent in a header", f.name, f.v))
		}
	}
	auth := strings.ReplaceAll(h.cfg.Format, secretPlaceholder, cred.Secret.Reveal())
	if !validHeaderValue(auth) {
		return Output{}, Rejected("secret contains control characters and cannot be sent in a header")
	}

	reqCtx, cancel := context.WithTimeoutCause(ctx, h.cfg.Timeout, errHTTPTimeout)
	defer cancel()
	// When the request was written: the API counts it from its arrival,
	// and so does the pool with it (Output.Sent). The transport may write
	// it again on a fresh connection: the last write is the one answered.
	var sentMu sync.Mutex
	var sent time.Time
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		sentMu.Lock()
		sent = time.Now()
		sentMu.Unlock()
	}})
	defer func() {
		sentMu.Lock()
		out.Sent = sent
		sentMu.Unlock()
	}()
	target := h.cfg.URL
	if h.spec != nil {
		target = provider.URL(cmp.Or(cred.URL, h.cfg.URL), cmp.Or(item.Endpoint, h.spec.Endpoint))
	}
	req, err := http.NewRequestWithContext(reqCtx, h.cfg.Method, target, bytes.NewReader(item.Payload))
	if err != nil {
		return Output{}, Permanent(fmt.Errorf("http: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	for name, values := range h.headers {
		req.Header[name] = slices.Clone(values) // not shared between requests
	}
	req.Header.Set(h.cfg.Header, auth)
	if h.spec == nil {
		// A provider gets what its own clients send, nothing of ours.
		req.Header.Set(headerItem, item.ID)
		req.Header.Set(headerBatch, item.Batch)
		req.Header.Set(headerAttempt, strconv.Itoa(item.Attempt))
		req.Header.Set(headerIdempotency, item.Batch+"/"+item.ID)
	}

	// Before the request left: a bound of when the API stamped its Date,
	// which holds even when the reply comes before the write is reported.
	started := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return Output{}, h.requestError(ctx, reqCtx, err)
	}
	defer resp.Body.Close()

	received := time.Now()
	h.clocks.Observe(req.URL.Host, resp.Header, started, received)
	rates := ParseRateHeaders(resp.Header, h.clocks.Now(req.URL.Host, received))
	reply := Output{Status: resp.StatusCode, RequestID: h.requestID(resp.Header)}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		body := &headBuffer{max: h.limit}
		var w io.Writer = body
		var whole *headBuffer // the reply as sent, for cost_from and the usage
		readMax := h.limit
		if h.cfg.CostFrom != "" || h.spec != nil {
			whole = &headBuffer{max: httpCostBodyMax}
			w = io.MultiWriter(body, whole)
			readMax = max(readMax, httpCostBodyMax)
		}
		sw := scrubberFor(h.cfg.Scrubber, cred).Writer(w)
		if _, err := io.CopyN(sw, resp.Body, int64(readMax)+httpDrainMax); err != nil && err != io.EOF {
			return reply, h.requestError(ctx, reqCtx, fmt.Errorf("reading the %d response: %w", resp.StatusCode, err))
		}
		_ = sw.Close()
		out := body.output()
		out.Status, out.RequestID = reply.Status, reply.RequestID
		out.Signals = rates.Signals
		switch {
		case h.cfg.CostFrom != "":
			out.Cost, out.CostNote = costAt(whole, h.cfg.CostFrom)
			if h.spec != nil {
				out.Usage = usageOf(whole)
			}
		case h.spec != nil:
			if out.Usage = usageOf(whole); out.Usage != nil {
				out.Cost = max(out.Usage.Total, 1)
			} else {
				out.CostNote = "the reply has no usage (or is longer than it is read for): its cost was not read"
			}
		}
		return out, nil
	}

	raw, _ := io.ReadAll(io.LimitReader(resp.Body, httpErrBodyMax)) // a cut body still serves
	_, _ = io.CopyN(io.Discard, resp.Body, httpDrainMax)
	sc := scrubberFor(h.cfg.Scrubber, cred)
	// The API's error reply is the run's output too (results show it as
	// the reply, in the providers' formats).
	errBody := &headBuffer{max: h.limit}
	_, _ = errBody.Write(sc.Bytes(raw))
	eo := errBody.output()
	reply.Body, reply.Truncated = eo.Body, eo.Truncated
	if resp.StatusCode != http.StatusTooManyRequests {
		reply.Signals = rates.Signals // a 429's go with its RateLimitedError
	}
	return reply, ReplyError(resp.StatusCode, resp.Header, raw, rates, sc)
}

// requestID is the API's ID of the request, from its reply's headers
// (the provider's header, else x-request-id or request-id).
func (h *httpHandler) requestID(hdr http.Header) string {
	if h.spec != nil {
		if v := hdr.Get(h.spec.RequestIDHeader); v != "" {
			return headString([]byte(v), 200)
		}
	}
	return headString([]byte(cmp.Or(hdr.Get("X-Request-Id"), hdr.Get("Request-Id"))), 200)
}

// usageOf reads the usage of a whole reply (nil when it has none, or was
// too long to be read whole).
func usageOf(whole *headBuffer) *provider.Usage {
	out := whole.output()
	if out.Truncated {
		return nil
	}
	u, ok := provider.ReadUsage(out.Body)
	if !ok {
		return nil
	}
	return &u
}

// costAt reads the number at a dotted path of a JSON reply: what the item
// really cost. It returns 0 and a note when the figure is missing or
// unreadable.
func costAt(body *headBuffer, path string) (int64, string) {
	out := body.output()
	if out.Truncated {
		return 0, fmt.Sprintf("cost_from %s: the reply is longer than %d bytes; its cost was not read", path, httpCostBodyMax)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(out.Body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Sprintf("cost_from %s: the reply is not JSON", path)
	}
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Sprintf("cost_from %s: the reply has no %s", path, key)
		}
		if v, ok = m[key]; !ok {
			return 0, fmt.Sprintf("cost_from %s: the reply has no %s", path, key)
		}
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Sprintf("cost_from %s: not a number in the reply", path)
	}
	f, err := n.Float64()
	if err != nil || f < 0 || f > math.MaxInt64/2 {
		return 0, fmt.Sprintf("cost_from %s: %s is not a usable cost", path, n)
	}
	return max(int64(math.Ceil(f)), 1), ""
}

// requestError maps an error from sending or reading: the run's
// cancellation, the request timeout, or a transient network error.
func (h *httpHandler) requestError(ctx, reqCtx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return canceledError("http", ctx)
	case errors.Is(context.Cause(reqCtx), errHTTPTimeout):
		return fmt.Errorf("http: timed out after %s: %w", h.cfg.Timeout, context.DeadlineExceeded)
	default:
		return fmt.Errorf("http: %w", err)
	}
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return strconv.Itoa(code) + " " + t
	}
	return "status " + strconv.Itoa(code)
}

// snippet returns the start of a response body as one line for an error
// text, with secrets scrubbed in case the server echoes one. The body was
// read up to httpErrBodyMax, far past the snippet's length, so a secret cut
// at that bound lies beyond what the snippet keeps.
func snippet(body []byte, sc *secret.Scrubber) string {
	text := sc.String(string(body))
	return headString([]byte(strings.Join(strings.Fields(text), " ")), httpSnippetMax)
}

// validToken reports whether s is an RFC 9110 token (a method or header
// name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters other than tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
