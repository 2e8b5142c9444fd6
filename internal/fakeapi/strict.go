package fakeapi

import (
	"bytes"
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The providers the strict mode speaks (Config.Provider).
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// DefaultOutputTokens is a strict reply's output tokens when neither
// Config.OutputTokens nor an output_tokens marker says otherwise.
const DefaultOutputTokens = 16

// AnthropicVersion is the anthropic-version keyfleet's real-time requests
// send and the stand-in's shapes follow.
const AnthropicVersion = "2023-06-01"

// AnthropicVersions are the anthropic-version values the strict Anthropic
// mode serves: AnthropicVersion, and 2026-10-21, the version the official
// Go SDK v2 sends (anthropic-sdk-go v2.0.0's changelog: "add support for
// new API version 2026-10-21"; its internal/requestconfig sets it on every
// request), whose Message Batches shapes are those served here. Any other
// value is refused as the API refuses an unknown version.
var AnthropicVersions = []string{AnthropicVersion, "2026-10-21"}

// DefaultModels are what GET /v1/models lists when Config.Models is empty.
var DefaultModels = map[string][]string{
	ProviderOpenAI:    {"gpt-4o", "gpt-4o-mini", "text-embedding-3-small"},
	ProviderAnthropic: {"claude-sonnet-4-6", "claude-haiku-4-5"},
}

// Received is one request as it reached the strict server.
type Received struct {
	Method string
	// Path is the URL path, RawQuery the query without "?".
	Path     string
	RawQuery string
	// KeyIndex is the index in Config.Keys of the key the request carried,
	// -1 when it carried none the server knows.
	KeyIndex int
	Header   http.Header
	// Body is every byte of the body (up to the endpoint's size limit).
	Body []byte
}

// Size limits of request bodies (variables so that the package's tests can
// lower them).
var (
	// maxJSONBody: Anthropic's Messages API takes at most 32 MB
	// (docs.anthropic.com/en/api/errors, "Request size limits"); OpenAI
	// documents none, the same bound is used.
	maxJSONBody int64 = 32 << 20
	// maxBatchFile: OpenAI's Batch API input file, "up to 200 MB"
	// (openai-openapi CreateBatchRequest.input_file_id).
	maxBatchFile int64 = 200 << 20
	// maxUpload: OpenAI's upload limit, "Individual files can be up to 512
	// MB" (openai-openapi POST /files).
	maxUpload int64 = 512 << 20
	// maxMessageBatch: "Batch API | 256 MB" (docs.anthropic.com/en/api/errors).
	maxMessageBatch int64 = 256 << 20
	// maxOpenAIBatchLines: "The file can contain up to 50,000 requests"
	// (openai-openapi CreateBatchRequest); maxAnthropicBatchRequests:
	// "limited to either 100,000 Message requests or 256 MB"
	// (docs.anthropic.com, Message Batches, "Batch limitations").
	maxOpenAIBatchLines       = 50000
	maxAnthropicBatchRequests = 100000
)

// strictState is the strict mode's part of a Server.
type strictState struct {
	provider     string
	models       []string // served models; empty: any
	listed       []string // GET /v1/models
	outputTokens int

	seq         atomic.Int64 // IDs
	forceStatus atomic.Int64 // every inference request gets this status (0: off)
	latency     atomic.Int64 // time.Duration of every inference request
	batchDelay  atomic.Int64 // time.Duration of a provider batch
	failNext    atomic.Int64 // batches still to fail (FailNextBatches)

	record    bool
	onRequest func(Received)
	recMu     sync.Mutex
	received  []Received

	store *batchStore
	srv   *Server

	// limMu guards every bucket: the keys' own and the accounts'.
	limMu    sync.Mutex
	accounts []*accountState
}

func newStrict(cfg Config) (*strictState, error) {
	switch cfg.Provider {
	case ProviderOpenAI, ProviderAnthropic:
	default:
		return nil, fmt.Errorf("fakeapi: provider %q: want %q, %q or none", cfg.Provider, ProviderOpenAI, ProviderAnthropic)
	}
	if cfg.OutputTokens < 0 {
		return nil, fmt.Errorf("fakeapi: output tokens must not be negative, got %d", cfg.OutputTokens)
	}
	if err := checkBatchConfig(cfg); err != nil {
		return nil, err
	}
	for i, m := range cfg.Models {
		if m == "" {
			return nil, fmt.Errorf("fakeapi: models[%d] is empty", i)
		}
	}
	st := &strictState{
		provider:     cfg.Provider,
		models:       slices.Clone(cfg.Models),
		outputTokens: cmp.Or(cfg.OutputTokens, DefaultOutputTokens),
		record:       cfg.Record,
		onRequest:    cfg.OnRequest,
		store:        newBatchStore(cfg),
	}
	st.latency.Store(int64(cfg.Latency))
	st.batchDelay.Store(int64(cfg.BatchDelay))
	listed := slices.Clone(cfg.Models)
	if len(listed) == 0 {
		listed = slices.Clone(DefaultModels[cfg.Provider])
		for _, k := range cfg.Keys {
			listed = append(listed, slices.Collect(maps.Keys(k.Models))...)
		}
		listed = append(listed, accountModels(cfg)...)
	}
	slices.Sort(listed)
	st.listed = slices.Compact(listed)
	return st, nil
}

// init finishes the strict state once the keys exist: the provider's own
// rate-limit headers, the keys' and accounts' buckets.
func (st *strictState) init(s *Server, cfg Config) {
	st.srv = s
	for _, k := range s.keys {
		k.hdrs = st.provider
	}
	st.initLimits(s, cfg)
}

func (st *strictState) openai() bool { return st.provider == ProviderOpenAI }

// nextID returns prefix followed by a number unique in the server, the
// same width everywhere so that IDs sort in creation order.
func (st *strictState) nextID(prefix string) string {
	return fmt.Sprintf("%sfake%012d", prefix, st.seq.Add(1))
}

// serves reports whether the strict server serves the model.
func (st *strictState) serves(model string) bool {
	return len(st.models) == 0 || slices.Contains(st.models, model)
}

// SetLatency changes how long every strict inference request takes
// (Config.Latency).
func (s *Server) SetLatency(d time.Duration) {
	if s.strict != nil {
		s.strict.latency.Store(int64(max(d, 0)))
	}
}

// ForceStatus makes every strict inference request (chat completions,
// embeddings, messages) get the provider's error for this status, such as
// 529 for Anthropic's overloaded_error or 500; 0 ends it. Batch and file
// endpoints are not affected.
func (s *Server) ForceStatus(status int) {
	if s.strict != nil {
		s.strict.forceStatus.Store(int64(status))
	}
}

// Received returns the requests that arrived so far (Config.Record), in
// arrival order.
func (s *Server) Received() []Received {
	if s.strict == nil {
		return nil
	}
	s.strict.recMu.Lock()
	defer s.strict.recMu.Unlock()
	return slices.Clone(s.strict.received)
}

// apiError is a refusal in the provider's terms: the HTTP status, the
// error's type and message, and for OpenAI its param and code (nil: JSON
// null).
type apiError struct {
	status  int
	typ     string
	message string
	param   *string
	code    *string
	header  map[string]string // extra reply headers (retry-after, ...)
}

func strp(s string) *string { return &s }

// openaiErrorBody is OpenAI's error shape, {"error": {"message", "type",
// "param", "code"}} (openai-openapi components.schemas.ErrorResponse,
// Error: all four required, param and code nullable).
type openaiErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// anthropicErrorBody is Anthropic's error shape, {"type": "error", "error":
// {"type", "message"}, "request_id"} (docs.anthropic.com/en/api/errors,
// "Error shapes"; anthropic-sdk-go shared.ErrorResponse).
type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// errorBody renders e in the provider's shape.
func (st *strictState) errorBody(e *apiError, reqID string) any {
	if st.openai() {
		var b openaiErrorBody
		b.Error.Message, b.Error.Type, b.Error.Param, b.Error.Code = e.message, e.typ, e.param, e.code
		return b
	}
	var b anthropicErrorBody
	b.Type, b.Error.Type, b.Error.Message, b.RequestID = "error", e.typ, e.message, reqID
	return b
}

func (st *strictState) writeError(w http.ResponseWriter, e *apiError, reqID string) {
	for k, v := range e.header {
		w.Header().Set(k, v)
	}
	writeStrictJSON(w, e.status, st.errorBody(e, reqID))
}

// writeStrictJSON writes v as the providers do: JSON without HTML escapes.
func writeStrictJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(marshal(v))
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain values and checked JSON
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Errors both providers answer with, in each one's terms.

// invalid is a 400 invalid_request_error (both providers use the type);
// param and code are OpenAI's ("" for null).
func invalid(message, param, code string) *apiError {
	e := &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: message}
	if param != "" {
		e.param = strp(param)
	}
	if code != "" {
		e.code = strp(code)
	}
	return e
}

// statusError is what a provider answers for an HTTP status that no more
// precise case covers: forced statuses (ForceStatus, the status marker)
// and batch lines failed on purpose.
func (st *strictState) statusError(status int) *apiError {
	if st.openai() {
		// OpenAI's types by status: openai-openapi has no list; these are
		// the ones its API sends (invalid_request_error for 4xx,
		// server_error for 5xx, "requests" for 429s).
		switch {
		case status == http.StatusTooManyRequests:
			return &apiError{status: status, typ: "requests", message: "Rate limit reached. Please try again later.", code: strp("rate_limit_exceeded")}
		case status >= 500:
			return &apiError{status: status, typ: "server_error", message: "The server had an error while processing your request. Sorry about that!"}
		case status == http.StatusUnauthorized:
			return &apiError{status: status, typ: "invalid_request_error", message: "Incorrect API key provided.", code: strp("invalid_api_key")}
		}
		return &apiError{status: status, typ: "invalid_request_error", message: fmt.Sprintf("This request was refused with status %d (fakeapi status marker).", status)}
	}
	// Anthropic's types by status: docs.anthropic.com/en/api/errors, "HTTP
	// errors"; messages as the API words them where known ("Overloaded",
	// "Internal server error").
	switch status {
	case http.StatusBadRequest:
		return &apiError{status: status, typ: "invalid_request_error", message: "This request was refused with status 400 (fakeapi status marker)."}
	case http.StatusUnauthorized:
		return &apiError{status: status, typ: "authentication_error", message: "invalid x-api-key"}
	case http.StatusForbidden:
		return &apiError{status: status, typ: "permission_error", message: "Your API key does not have permission to use the specified resource."}
	case http.StatusNotFound:
		return &apiError{status: status, typ: "not_found_error", message: "Not Found"}
	case http.StatusRequestEntityTooLarge:
		return &apiError{status: status, typ: "request_too_large", message: "Request exceeds the maximum allowed number of bytes."}
	case http.StatusTooManyRequests:
		return &apiError{status: status, typ: "rate_limit_error", message: "Number of requests has exceeded your rate limit. Please try again later."}
	case 529:
		return &apiError{status: status, typ: "overloaded_error", message: "Overloaded"}
	}
	if status >= 500 {
		return &apiError{status: status, typ: "api_error", message: "Internal server error"}
	}
	return &apiError{status: status, typ: "invalid_request_error", message: fmt.Sprintf("This request was refused with status %d (fakeapi status marker).", status)}
}

// serveStrict answers one request in the provider's terms.
func (s *Server) serveStrict(w http.ResponseWriter, r *http.Request) {
	st := s.strict
	reqID := st.nextID("req_")
	if st.openai() {
		w.Header().Set("x-request-id", reqID) // as OpenAI's replies carry it
	} else {
		w.Header().Set("request-id", reqID) // docs.anthropic.com/en/api/errors, "Request id"
	}
	k, authErr := s.strictAuth(r)
	body, tooLarge, readErr := readBody(r, bodyLimit(r))
	st.keep(r, k, body)
	switch {
	case authErr != nil:
		s.unauthorized.Add(1)
		st.writeError(w, authErr, reqID)
		return
	case k.revoked.Load():
		k.requests.Add(1)
		k.refused.Add(1)
		st.writeError(w, st.revokedError(r), reqID)
		return
	}
	if !st.openai() {
		if e := anthropicVersionError(r.Header.Values("anthropic-version")); e != nil {
			s.badRequests.Add(1)
			st.writeError(w, e, reqID)
			return
		}
	}
	switch {
	case readErr != nil:
		s.badRequests.Add(1)
		st.writeError(w, invalid("The request body could not be read.", "", ""), reqID)
		return
	case tooLarge:
		s.badRequests.Add(1)
		e := st.statusError(http.StatusRequestEntityTooLarge)
		if st.openai() {
			e.typ, e.message = "invalid_request_error", "Request body too large."
		}
		st.writeError(w, e, reqID)
		return
	}
	call := &call{s: s, st: st, k: k, w: w, r: r, body: body, reqID: reqID}
	if !st.route(call) {
		s.badRequests.Add(1)
		st.writeError(w, st.notFound(r), reqID)
	}
}

// call is one authenticated strict request on its way to its handler.
type call struct {
	s     *Server
	st    *strictState
	k     *keyState
	w     http.ResponseWriter
	r     *http.Request
	body  []byte
	reqID string
}

func (c *call) fail(e *apiError) {
	if e.status == http.StatusBadRequest || e.status == http.StatusNotFound {
		c.s.badRequests.Add(1)
	}
	c.st.writeError(c.w, e, c.reqID)
}

func (c *call) reply(v any) { writeStrictJSON(c.w, http.StatusOK, v) }

// route finds the handler of the request's method and path; false when the
// provider has none.
func (st *strictState) route(c *call) bool {
	m, p := c.r.Method, c.r.URL.Path
	seg := strings.Split(strings.TrimPrefix(p, "/v1/"), "/")
	if !strings.HasPrefix(p, "/v1/") {
		return false
	}
	get, post, del := m == http.MethodGet, m == http.MethodPost, m == http.MethodDelete
	if st.openai() {
		switch {
		case post && p == "/v1/chat/completions":
			c.inference(endpointChat)
		case post && p == "/v1/embeddings":
			c.inference(endpointEmbeddings)
		case post && p == "/v1/responses":
			c.inference(endpointResponses)
		case get && p == "/v1/models":
			c.listModels()
		case get && len(seg) == 2 && seg[0] == "models":
			c.getModel(seg[1])
		case post && p == "/v1/files":
			c.uploadFile()
		case get && p == "/v1/files":
			c.listFiles()
		case get && len(seg) == 2 && seg[0] == "files":
			c.getFile(seg[1])
		case del && len(seg) == 2 && seg[0] == "files":
			c.deleteFile(seg[1])
		case get && len(seg) == 3 && seg[0] == "files" && seg[2] == "content":
			c.fileContent(seg[1])
		case post && p == "/v1/batches":
			c.createBatch()
		case get && p == "/v1/batches":
			c.listBatches()
		case get && len(seg) == 2 && seg[0] == "batches":
			c.getBatch(seg[1])
		case post && len(seg) == 3 && seg[0] == "batches" && seg[2] == "cancel":
			c.cancelBatch(seg[1])
		default:
			return false
		}
		return true
	}
	switch {
	case post && p == "/v1/messages":
		c.inference(endpointMessages)
	case get && p == "/v1/models":
		c.listModels()
	case get && len(seg) == 2 && seg[0] == "models":
		c.getModel(seg[1])
	case post && p == "/v1/messages/batches":
		c.createMessageBatch()
	case get && p == "/v1/messages/batches":
		c.listMessageBatches()
	case get && len(seg) == 3 && seg[0] == "messages" && seg[1] == "batches":
		c.getMessageBatch(seg[2])
	case del && len(seg) == 3 && seg[0] == "messages" && seg[1] == "batches":
		c.deleteMessageBatch(seg[2])
	case post && len(seg) == 4 && seg[0] == "messages" && seg[1] == "batches" && seg[3] == "cancel":
		c.cancelMessageBatch(seg[2])
	case get && len(seg) == 4 && seg[0] == "messages" && seg[1] == "batches" && seg[3] == "results":
		c.messageBatchResults(seg[2])
	default:
		return false
	}
	return true
}

// notFound is the provider's answer to a path it has no endpoint for.
func (st *strictState) notFound(r *http.Request) *apiError {
	if st.openai() {
		// {"error": {"message": "Invalid URL (POST /v1/chat/completions/chat/completions)",
		// "type": "invalid_request_error", "param": null, "code": null}}, 404: as
		// quoted from the API in github.com/harry0703/MoneyPrinterTurbo/issues/57.
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)}
	}
	// not_found_error "Not Found": as quoted from the API in
	// github.com/danielmiessler/Fabric/issues/1140.
	return &apiError{status: http.StatusNotFound, typ: "not_found_error", message: "Not Found"}
}

// strictAuth finds the request's key as the provider reads it: OpenAI
// "Authorization: Bearer <key>", Anthropic "x-api-key: <key>".
func (s *Server) strictAuth(r *http.Request) (*keyState, *apiError) {
	if s.strict.openai() {
		v := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(v, "Bearer ")
		if v == "" || !ok || secret == "" {
			// The API's words for a request without a key.
			return nil, &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error",
				message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys."}
		}
		if k := s.keyBySecret(secret); k != nil {
			return k, nil
		}
		return nil, openaiBadKey(secret)
	}
	v := r.Header.Get("x-api-key")
	if v == "" {
		// {"type":"error","error":{"type":"authentication_error","message":"x-api-key header
		// is required"},"request_id":...}: quoted in github.com/n8n-io/n8n/issues/37930.
		return nil, &apiError{status: http.StatusUnauthorized, typ: "authentication_error", message: "x-api-key header is required"}
	}
	if k := s.keyBySecret(v); k != nil {
		return k, nil
	}
	// "invalid x-api-key": quoted with its request_id in
	// github.com/emilsvennesson/opencode-websearch/issues/15.
	return nil, &apiError{status: http.StatusUnauthorized, typ: "authentication_error", message: "invalid x-api-key"}
}

// revokedError is the provider's answer for a key it no longer takes.
func (st *strictState) revokedError(r *http.Request) *apiError {
	if st.openai() {
		secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return openaiBadKey(secret)
	}
	return &apiError{status: http.StatusUnauthorized, typ: "authentication_error", message: "invalid x-api-key"}
}

// openaiBadKey is OpenAI's 401 for a key it does not take, the key shown
// masked: "Incorrect API key provided: sk-abc***...1234. You can find your
// API key at https://platform.openai.com/account/api-keys." with code
// invalid_api_key (help.openai.com article 6891781, "Error Code 401 -
// Incorrect API key provided").
func openaiBadKey(secret string) *apiError {
	return &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: strp("invalid_api_key"),
		message: fmt.Sprintf("Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.", maskKey(secret))}
}

// maskKey shows a key as OpenAI's 401 does: its first 3 and last 4
// characters around stars; a short key is all stars.
func maskKey(k string) string {
	if len(k) < 12 {
		return strings.Repeat("*", len(k))
	}
	return k[:3] + strings.Repeat("*", len(k)-7) + k[len(k)-4:]
}

// keyBySecret compares every key's secret in constant time.
func (s *Server) keyBySecret(secret string) *keyState {
	found := -1
	for i, k := range s.keys {
		if subtle.ConstantTimeCompare([]byte(secret), k.secret) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return s.keys[found]
}

// anthropicVersionError checks the anthropic-version header: required
// ({"type":"invalid_request_error","message":"anthropic-version: header is
// required"}, quoted in github.com/PipedreamHQ/pipedream/issues/9697), and
// a version the stand-in serves ("anthropic-version: \"X\" is not a valid
// version", quoted in github.com/decolua/9router/issues/2357).
func anthropicVersionError(values []string) *apiError {
	if len(values) == 0 || values[0] == "" {
		return invalid("anthropic-version: header is required", "", "")
	}
	v := strings.Join(values, ", ")
	if !slices.Contains(AnthropicVersions, v) {
		return invalid(fmt.Sprintf("anthropic-version: %q is not a valid version", v), "", "")
	}
	return nil
}

// bodyLimit is the largest body the request's endpoint takes.
func bodyLimit(r *http.Request) int64 {
	switch r.URL.Path {
	case "/v1/files":
		return maxUpload
	case "/v1/messages/batches":
		return maxMessageBatch
	}
	return maxJSONBody
}

// readBody reads at most limit bytes of the body; tooLarge when there was
// more.
func readBody(r *http.Request, limit int64) (body []byte, tooLarge bool, err error) {
	if r.Body == nil {
		return nil, false, nil
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(body)) > limit {
		return body[:limit], true, nil
	}
	return body, false, nil
}

// keep records what arrived (Config.Record, Config.OnRequest).
func (st *strictState) keep(r *http.Request, k *keyState, body []byte) {
	if !st.record && st.onRequest == nil {
		return
	}
	got := Received{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, KeyIndex: -1,
		Header: r.Header.Clone(), Body: bytes.Clone(body)}
	if k != nil {
		got.KeyIndex = k.index
	}
	if st.onRequest != nil {
		st.onRequest(got)
	}
	if st.record {
		st.recMu.Lock()
		st.received = append(st.received, got)
		st.recMu.Unlock()
	}
}

// retryHeaders are a 429's retry-after (whole seconds) and, for OpenAI,
// retry-after-ms: the headers the SDKs read (openai-go and
// anthropic-sdk-go internal/requestconfig: "Retry-After-Ms",
// "Retry-After"). Both are rounded up, at least 1: a retry at the time
// they say fits.
func (st *strictState) retryHeaders(wait time.Duration) map[string]string {
	h := map[string]string{"retry-after": strconv.FormatInt(ceilSeconds(wait), 10)}
	if st.openai() {
		h["retry-after-ms"] = strconv.FormatInt(max(int64((wait+time.Millisecond-1)/time.Millisecond), 1), 10)
	}
	return h
}
