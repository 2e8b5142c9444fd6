package fakeapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// batchStore holds the strict mode's files and provider batches. Batches
// move on lazily: each look at one (or at a list) advances it to what its
// age and the server's BatchDelay make of it, so no goroutine runs them.
type batchStore struct {
	mu      sync.Mutex
	files   map[string]*storedFile
	batches map[string]*providerBatch
	// cancelDelay: how long a cancelled batch stays cancelling (OpenAI)
	// or canceling (Anthropic) before it ends (Config.CancelDelay,
	// SetCancelDelay), a time.Duration.
	cancelDelay atomic.Int64
}

func newBatchStore(cfg Config) *batchStore {
	s := &batchStore{files: map[string]*storedFile{}, batches: map[string]*providerBatch{}}
	s.cancelDelay.Store(int64(cfg.CancelDelay))
	return s
}

// checkBatchConfig refuses the batch settings of cfg that cannot be.
func checkBatchConfig(cfg Config) error {
	switch {
	case cfg.BatchDelay < 0:
		return fmt.Errorf("fakeapi: batch delay must not be negative, got %s", cfg.BatchDelay)
	case cfg.CancelDelay < 0:
		return fmt.Errorf("fakeapi: cancel delay must not be negative, got %s", cfg.CancelDelay)
	}
	return nil
}

// storedFile is an OpenAI file: an upload or a batch's output.
type storedFile struct {
	id, filename, purpose string
	owner                 int // key index
	created               time.Time
	data                  []byte
}

// batchLine is one request of a provider batch.
type batchLine struct {
	customID string
	body     []byte // the request: OpenAI's "body", Anthropic's "params"
	lineID   string // OpenAI's batch_req_ id of the output line

	// The outcome, once done: "succeeded", "errored", "expired" or
	// "canceled", with the reply's status, request ID and body.
	result string
	status int
	reqID  string
	reply  []byte
	in     int64 // usage of a success
	out    int64
}

// providerBatch is an OpenAI batch or an Anthropic message batch.
type providerBatch struct {
	id      string
	owner   int
	created time.Time
	lines   []*batchLine
	done    int  // lines with a result
	fail    bool // FailNextBatches: fails at validation (OpenAI) or errors every request (Anthropic)

	// OpenAI: the status and its times (nil: null), the input and its
	// validation, the output files.
	status           string
	endpoint         string
	inputFileID      string
	completionWindow string
	metadata         json.RawMessage
	model            string
	errors           []batchError
	times            map[string]time.Time // in_progress_at, finalizing_at, ...
	outputFileID     string
	errorFileID      string

	// Anthropic: canceling/ended times.
	cancelInitiated time.Time
	ended           time.Time
}

// batchError is one entry of an OpenAI batch's errors.data
// (openai-openapi components.schemas.BatchError: code, message, param,
// line).
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// SetBatchDelay changes how long a provider batch takes from its creation
// to its last request (Config.BatchDelay); batches already running follow
// the new value: SetBatchDelay(0) lets every one finish at its next look.
func (s *Server) SetBatchDelay(d time.Duration) {
	if s.strict != nil {
		s.strict.batchDelay.Store(int64(max(d, 0)))
	}
}

// SetCancelDelay changes how long a cancelled provider batch stays
// cancelling (OpenAI) or canceling (Anthropic) before it ends
// (Config.CancelDelay); batches already cancelling follow the new value:
// SetCancelDelay(0) ends every one at its next look.
func (s *Server) SetCancelDelay(d time.Duration) {
	if s.strict != nil {
		s.strict.store.cancelDelay.Store(int64(max(d, 0)))
	}
}

// cancelEnds reports whether a batch whose cancel began at since has
// ended it by now (Config.CancelDelay after it). Until then it runs no
// more requests: it ends with those done before the cancel.
func (st *strictState) cancelEnds(since, now time.Time) bool {
	return !now.Before(since.Add(time.Duration(st.store.cancelDelay.Load())))
}

// FailNextBatches makes the next n batches created fail: an OpenAI batch
// fails at validation (status "failed", errors.data code
// token_limit_exceeded, as OpenAI fails a batch over the organization's
// enqueued-token limit); every request of an Anthropic message batch ends
// errored with api_error.
func (s *Server) FailNextBatches(n int) {
	if s.strict != nil {
		s.strict.failNext.Store(int64(max(n, 0)))
	}
}

// ExpireBatches makes every batch not yet ended expire now, as at the end
// of its 24-hour window: requests not done are expired (OpenAI: error-file
// lines with code batch_expired, status "expired"; Anthropic: results of
// type "expired", processing_status "ended"); those done keep their
// results.
func (s *Server) ExpireBatches() {
	st := s.strict
	if st == nil {
		return
	}
	st.store.mu.Lock()
	defer st.store.mu.Unlock()
	now := time.Now()
	for _, b := range st.store.batches {
		st.advance(b, now)
		if st.openai() {
			switch b.status {
			case "validating", "in_progress", "cancelling":
				st.endOpenAI(b, "expired", now)
			}
		} else if b.ended.IsZero() {
			b.finish("expired")
			b.ended = now
		}
	}
}

// takeFail reports whether the batch being created is to fail.
func (st *strictState) takeFail() bool {
	for {
		n := st.failNext.Load()
		if n <= 0 {
			return false
		}
		if st.failNext.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// due is when the batch's i-th request is done: the batches' delay spread
// evenly over their requests.
func (st *strictState) due(b *providerBatch, i int) time.Time {
	d := time.Duration(st.batchDelay.Load())
	return b.created.Add(time.Duration(float64(d) * float64(i+1) / float64(len(b.lines))))
}

// process runs the batch's requests that are due by now, but those held
// by a [fake:hold] marker. The caller holds the store's lock.
func (st *strictState) process(b *providerBatch, now time.Time) {
	ep := endpointMessages
	if st.openai() {
		ep = endpoint(b.endpoint)
	}
	for i, l := range b.lines {
		if st.due(b, i).After(now) {
			return
		}
		if l.result == "" && !bytes.Contains(l.body, holdMarker) {
			st.runLine(b, ep, l)
			b.done++
		}
	}
}

var holdMarker = []byte("[fake:hold]")

// finish gives every request not done the result ("expired",
// "canceled").
func (b *providerBatch) finish(result string) {
	for _, l := range b.lines {
		if l.result == "" {
			l.result = result
			b.done++
		}
	}
}

// runLine answers one batch request as real time would, without the key's
// rate limits (a batch has its own), and bills its usage as Batch API
// usage of the batch's key.
func (st *strictState) runLine(b *providerBatch, ep endpoint, l *batchLine) {
	l.reqID = st.nextID("req_")
	q, e := st.parseQuery(ep, l.body)
	if e == nil && !st.serves(q.model) {
		e = st.modelNotFound(q.model)
	}
	if e == nil && ep == endpointMessages && q.max < 1 {
		// "max_tokens of at least 1. max_tokens: 0 (cache pre-warming) is not
		// supported inside a batch" (platform.claude.com batch-processing).
		e = invalid("max_tokens: Input should be greater than or equal to 1", "", "")
	}
	if e == nil && b.fail {
		e = st.statusError(http.StatusInternalServerError)
	}
	if e == nil {
		e = st.markError(q, nil)
	}
	if e != nil {
		l.result, l.status, l.reply = "errored", e.status, marshal(st.errorBody(e, l.reqID))
		return
	}
	l.result, l.status = "succeeded", http.StatusOK
	l.reply = marshal(st.replyBody(q, l.reqID, true))
	l.in, l.out = q.input, q.out*int64(q.n)
	st.srv.keys[b.owner].usage.add(q.model, true, l.in, l.out)
}

// advance brings a batch up to now. The caller holds the store's lock.
func (st *strictState) advance(b *providerBatch, now time.Time) {
	if st.openai() {
		st.advanceOpenAI(b, now)
	} else {
		st.advanceAnthropic(b, now)
	}
}

// owned returns the key's batch of that ID, advanced to now; nil when the
// key has none of that ID (another key's batch is not found either). The
// caller holds the store's lock.
func (c *call) owned(id string) *providerBatch {
	b := c.st.store.batches[id]
	if b == nil || b.owner != c.k.index {
		return nil
	}
	c.st.advance(b, time.Now())
	return b
}

// withBatch calls fn with the key's batch id (as owned finds it) under
// the store's lock, or answers notFound(id), the provider's 404 for a
// batch.
func (c *call) withBatch(id string, notFound func(id string) *apiError, fn func(*providerBatch)) {
	c.st.store.mu.Lock()
	defer c.st.store.mu.Unlock()
	b := c.owned(id)
	if b == nil {
		c.fail(notFound(id))
		return
	}
	fn(b)
}

// ownedBatches are the key's batches, newest first, advanced to now. The
// caller holds the store's lock.
func (c *call) ownedBatches() []*providerBatch {
	var out []*providerBatch
	now := time.Now()
	for _, b := range c.st.store.batches {
		if b.owner == c.k.index {
			c.st.advance(b, now)
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *providerBatch) int { return -compareIDs(a.id, b.id) })
	return out
}

// compareIDs orders IDs by creation (their fixed-width number).
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pageLimit reads a list's limit query parameter: default def, 1..most.
func pageLimit(v string, def, most int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, false
	}
	return n, true
}
