package fakeapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// Anthropic's Message Batches API (anthropic-sdk-go messagebatch.go:
// POST /v1/messages/batches, GET /v1/messages/batches/{id}, GET
// .../results, POST .../cancel, GET /v1/messages/batches, DELETE
// /v1/messages/batches/{id}).

// customIDPattern: a request's custom_id, 1 to 64 letters, digits, "_"
// or "-" (the Message Batches API reference's pattern
// ^[a-zA-Z0-9_-]{1,64}$; "requests.0.custom_id: String should have at most
// 64 characters" is the API's answer quoted in
// github.com/anthropics/anthropic-sdk-python/issues/984).
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// createMessageBatch answers POST /v1/messages/batches ({"requests":
// [{"custom_id", "params"}]}, at most 100,000 requests and 256 MB). The
// request list is checked at once; each request's params are checked when
// it runs, and a bad one ends errored ("validation of the params object
// for each message request is performed asynchronously", Message Batches
// guide).
func (c *call) createMessageBatch() {
	st := c.st
	names, fields, err := objectFields(c.body)
	if err != nil {
		c.fail(st.badJSON())
		return
	}
	for _, n := range names {
		if n != "requests" {
			c.fail(invalid(n+": Extra inputs are not permitted", "", ""))
			return
		}
	}
	raw, ok := fields["requests"]
	if !ok {
		c.fail(st.missing("requests"))
		return
	}
	if kindOf(raw) != kindArray {
		c.fail(st.wrongType("requests", []jsonKind{kindArray}, kindOf(raw)))
		return
	}
	var items []json.RawMessage
	_ = json.Unmarshal(raw, &items)
	switch {
	case len(items) == 0:
		c.fail(invalid("requests: List should have at least 1 item after validation, not 0", "", ""))
		return
	case len(items) > maxAnthropicBatchRequests:
		c.fail(invalid(fmt.Sprintf("requests: List should have at most %d items after validation, not %d", maxAnthropicBatchRequests, len(items)), "", ""))
		return
	}
	lines := make([]*batchLine, len(items))
	seen := map[string]int{}
	for i, item := range items {
		path := fmt.Sprintf("requests.%d", i)
		inames, ifields, err := objectFields(item)
		if err != nil {
			c.fail(st.wrongType(path, []jsonKind{kindObject}, kindOf(item)))
			return
		}
		for _, n := range inames {
			if n != "custom_id" && n != "params" {
				c.fail(invalid(path+"."+n+": Extra inputs are not permitted", "", ""))
				return
			}
		}
		idRaw, ok := ifields["custom_id"]
		if !ok {
			c.fail(st.missing(path + ".custom_id"))
			return
		}
		var id string
		if json.Unmarshal(idRaw, &id) != nil {
			c.fail(st.wrongType(path+".custom_id", []jsonKind{kindString}, kindOf(idRaw)))
			return
		}
		switch {
		case id == "":
			c.fail(invalid(path+".custom_id: String should have at least 1 character", "", ""))
			return
		case len(id) > 64:
			c.fail(invalid(path+".custom_id: String should have at most 64 characters", "", ""))
			return
		case !customIDPattern.MatchString(id):
			c.fail(invalid(path+".custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", "", ""))
			return
		}
		if j, dup := seen[id]; dup {
			c.fail(invalid(fmt.Sprintf("requests.%d.custom_id: custom_id %q is already used by requests.%d; each request's custom_id must be unique within the batch", i, id, j), "", ""))
			return
		}
		seen[id] = i
		params, ok := ifields["params"]
		if !ok {
			c.fail(st.missing(path + ".params"))
			return
		}
		if kindOf(params) != kindObject {
			c.fail(st.wrongType(path+".params", []jsonKind{kindObject}, kindOf(params)))
			return
		}
		lines[i] = &batchLine{customID: id, body: params}
	}
	b := &providerBatch{id: st.nextID("msgbatch_"), owner: c.k.index, created: time.Now(), lines: lines, fail: st.takeFail()}
	st.store.mu.Lock()
	st.store.batches[b.id] = b
	st.store.mu.Unlock()
	c.k.batch.created.Add(1)
	c.reply(c.messageBatchObject(b))
}

// advanceAnthropic runs the batch's requests that are due; once none is
// left it ends (processing_status "ended"). A canceling batch runs no more
// requests and ends at the first look Config.CancelDelay after the
// cancel, its requests not done before the cancel canceled ("Once
// cancellation is initiated, the batch enters a canceling state",
// Message Batches API, cancel). The caller holds the store's lock.
func (st *strictState) advanceAnthropic(b *providerBatch, now time.Time) {
	if !b.ended.IsZero() {
		return
	}
	if !b.cancelInitiated.IsZero() {
		if st.cancelEnds(b.cancelInitiated, now) {
			b.finish("canceled")
			b.ended = now
		}
		return
	}
	st.process(b, now)
	if b.done == len(b.lines) {
		b.ended = now
	}
}

// messageBatchObject is a message_batch (anthropic-sdk-go MessageBatch:
// id, type, processing_status in_progress|canceling|ended, request_counts
// {processing, succeeded, errored, canceled, expired} — every request
// counts as processing until the batch ends —, ended_at, created_at,
// expires_at (24 hours after creation), archived_at, cancel_initiated_at,
// results_url once ended; times in RFC 3339).
func (c *call) messageBatchObject(b *providerBatch) any {
	type counts struct {
		Processing int `json:"processing"`
		Succeeded  int `json:"succeeded"`
		Errored    int `json:"errored"`
		Canceled   int `json:"canceled"`
		Expired    int `json:"expired"`
	}
	var n counts
	status := "in_progress"
	var ended, cancel, results any
	if !b.cancelInitiated.IsZero() {
		status, cancel = "canceling", rfc3339(b.cancelInitiated)
	}
	if b.ended.IsZero() {
		n.Processing = len(b.lines)
	} else {
		status, ended = "ended", rfc3339(b.ended)
		results = fmt.Sprintf("%s/v1/messages/batches/%s/results", c.baseURL(), b.id)
		for _, l := range b.lines {
			switch l.result {
			case "succeeded":
				n.Succeeded++
			case "errored":
				n.Errored++
			case "canceled":
				n.Canceled++
			case "expired":
				n.Expired++
			}
		}
	}
	return struct {
		ID                string `json:"id"`
		Type              string `json:"type"`
		ProcessingStatus  string `json:"processing_status"`
		RequestCounts     counts `json:"request_counts"`
		EndedAt           any    `json:"ended_at"`
		CreatedAt         string `json:"created_at"`
		ExpiresAt         string `json:"expires_at"`
		ArchivedAt        any    `json:"archived_at"`
		CancelInitiatedAt any    `json:"cancel_initiated_at"`
		ResultsURL        any    `json:"results_url"`
	}{b.id, "message_batch", status, n, ended, rfc3339(b.created), rfc3339(b.created.Add(24 * time.Hour)), nil, cancel, results}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// baseURL is the server's own address as the request reached it.
func (c *call) baseURL() string {
	scheme := "http"
	if c.r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.r.Host
}

// messageBatchNotFound: not_found_error, as for any unknown resource.
func messageBatchNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "not_found_error", message: fmt.Sprintf("Message batch %s not found.", id)}
}

func (c *call) getMessageBatch(id string) {
	c.withBatch(id, messageBatchNotFound, func(b *providerBatch) {
		c.k.batch.polls.Add(1)
		c.reply(c.messageBatchObject(b))
	})
}

// cancelMessageBatch answers POST .../cancel: an in-progress batch starts
// canceling (and ends at a look Config.CancelDelay later); a canceling one
// is answered as it is; an ended one is refused.
func (c *call) cancelMessageBatch(id string) {
	c.withBatch(id, messageBatchNotFound, func(b *providerBatch) {
		if !b.ended.IsZero() {
			c.fail(invalid(fmt.Sprintf("Message batch %s has already ended and cannot be canceled.", id), "", ""))
			return
		}
		if b.cancelInitiated.IsZero() {
			b.cancelInitiated = time.Now()
		}
		c.k.batch.cancelled.Add(1)
		c.reply(c.messageBatchObject(b))
	})
}

// deleteMessageBatch answers DELETE /v1/messages/batches/{id} for an
// ended batch ({"id", "type": "message_batch_deleted"}); "Message Batches
// can only be deleted once they've finished processing" (anthropic-sdk-go
// MessageBatchService.Delete).
func (c *call) deleteMessageBatch(id string) {
	c.withBatch(id, messageBatchNotFound, func(b *providerBatch) {
		if b.ended.IsZero() {
			c.fail(invalid(fmt.Sprintf("Message batch %s is still in progress; cancel it and wait for it to end before deleting it.", id), "", ""))
			return
		}
		delete(c.st.store.batches, id)
		c.reply(struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}{id, "message_batch_deleted"})
	})
}

// messageBatchResults answers GET .../results once the batch has ended: a
// JSONL line per request, in request order, {"custom_id", "result":
// {"type": "succeeded", "message"} | {"type": "errored", "error": <an
// error response>} | {"type": "canceled"} | {"type": "expired"}}
// (anthropic-sdk-go MessageBatchIndividualResponse, MessageBatch*Result).
// Before the batch ends its results_url is null and this path is not
// found.
func (c *call) messageBatchResults(id string) {
	c.st.store.mu.Lock()
	b := c.owned(id)
	var buf bytes.Buffer
	if b != nil && !b.ended.IsZero() {
		for _, l := range b.lines {
			buf.Write(anthropicResultLine(l))
			buf.WriteByte('\n')
		}
	}
	ended := b != nil && !b.ended.IsZero()
	c.st.store.mu.Unlock()
	if !ended {
		c.fail(messageBatchNotFound(id))
		return
	}
	c.k.batch.results.Add(1)
	c.w.Header().Set("Content-Type", "application/binary")
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(buf.Bytes())
}

func anthropicResultLine(l *batchLine) []byte {
	type result struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message,omitempty"`
		Error   json.RawMessage `json:"error,omitempty"`
	}
	r := result{Type: l.result}
	switch l.result {
	case "succeeded":
		r.Message = l.reply
	case "errored":
		r.Error = l.reply
	}
	return marshal(struct {
		CustomID string `json:"custom_id"`
		Result   result `json:"result"`
	}{l.customID, r})
}

// listMessageBatches answers GET /v1/messages/batches (limit 1..1000,
// default 20; after_id: the page after that batch; before_id: the page
// just before it): the key's batches, most recently created first
// (anthropic-sdk-go MessageBatchListParams; the page has data, has_more,
// first_id, last_id).
func (c *call) listMessageBatches() {
	q := c.r.URL.Query()
	limit, ok := pageLimit(q.Get("limit"), 20, 1000)
	if !ok {
		c.fail(invalid("limit: Input should be less than or equal to 1000 and greater than or equal to 1", "", ""))
		return
	}
	c.st.store.mu.Lock()
	defer c.st.store.mu.Unlock()
	list := c.ownedBatches() // newest first
	var more bool
	if before := q.Get("before_id"); before != "" {
		// The batches newer than before_id, the `limit` closest to it.
		var newer []*providerBatch
		for _, b := range list {
			if compareIDs(b.id, before) > 0 {
				newer = append(newer, b)
			}
		}
		more = len(newer) > limit
		list = newer[max(0, len(newer)-limit):]
	} else {
		list = after(list, func(b *providerBatch) string { return b.id }, q.Get("after_id"), true)
		more = len(list) > limit
		list = list[:min(limit, len(list))]
	}
	data := make([]any, len(list))
	for i, b := range list {
		data[i] = c.messageBatchObject(b)
	}
	ids := firstLast(list, func(b *providerBatch) string { return b.id })
	c.k.batch.lists.Add(1)
	c.reply(struct {
		Data    []any `json:"data"`
		HasMore bool  `json:"has_more"`
		FirstID any   `json:"first_id"`
		LastID  any   `json:"last_id"`
	}{data, more, ids[0], ids[1]})
}
