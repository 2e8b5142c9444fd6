package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// startDashboardWith serves a dashboard with o (Queue, Pool, Logger and
// Interval filled in) until the test ends and returns its base URL.
func (e *env) startDashboardWith(o dashboard.Options) string {
	e.t.Helper()
	o.Queue, o.Pool, o.Interval = e.q, e.pool, 200*time.Millisecond
	o.Logger = zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel))
	srv, err := dashboard.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	e.t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			e.t.Errorf("dashboard: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

func items(n int, format string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, format+"\n", i)
	}
	return b.String()
}

type enqueueReply struct {
	Batch      string `json:"batch"`
	Items      int    `json:"items"`
	New        int    `json:"new"`
	Duplicates int    `json:"duplicates"`
	Priority   int    `json:"priority"`
	Weight     int    `json:"weight"`
	Error      string `json:"error"`
	BadLines   int    `json:"bad_lines"`
	Problems   []struct {
		Line      int    `json:"line"`
		ID        string `json:"id"`
		FirstLine int    `json:"first_line"`
	} `json:"problems"`
}

func decodeReply(t *testing.T, body string) enqueueReply {
	t.Helper()
	var r enqueueReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("not a JSON reply: %v\n%s", err, body)
	}
	return r
}

// The HTTP API enqueues as `producer enqueue` does: behind the admin
// token, JSON Lines only, the body bounded, all or nothing, idempotent
// (two identical POSTs at once add each item once); the batch object
// follows it to done; the results need the token and are the JSON Lines
// `producer results` writes. Nothing of it shows a secret.
func TestBatchesAPI(t *testing.T) {
	e := newEnv(t)
	e.startWorker("w1")
	token := randomSecret("admin-", 16)
	bearer := "Bearer " + token
	base := e.startDashboardWith(dashboard.Options{AdminToken: token, MaxEnqueueBody: 64 << 10})
	readOnly := e.startDashboardWith(dashboard.Options{})
	rec := &recorder{}
	enq := func(query, contentType, auth, body string, hdr ...string) (int, enqueueReply) {
		t.Helper()
		code, resp := post(t, rec, base+"/api/batches?"+query, contentType, auth, body, hdr...)
		return code, decodeReply(t, resp)
	}
	good := items(10, `{"id":"doc-%d","ms":5}`)

	// Refusals: nothing is enqueued by any of them.
	for _, tc := range []struct {
		name, url, contentType, auth, body string
		hdr                                []string
		code                               int
		says                               string
	}{
		{"read-only", readOnly + "/api/batches?batch=x", "application/x-ndjson", bearer, good, nil, http.StatusForbidden, "read-only"},
		{"no token", base + "/api/batches?batch=x", "application/x-ndjson", "", good, nil, http.StatusUnauthorized, "admin token"},
		{"wrong token", base + "/api/batches?batch=x", "application/x-ndjson", "Bearer " + strings.Repeat("x", 30), good, nil, http.StatusUnauthorized, "admin token"},
		{"JSON", base + "/api/batches?batch=x", "application/json", bearer, good, nil, http.StatusUnsupportedMediaType, "application/x-ndjson"},
		{"a form", base + "/api/batches?batch=x", "application/x-www-form-urlencoded", bearer, good, nil, http.StatusUnsupportedMediaType, "JSON Lines"},
		{"cross-site", base + "/api/batches?batch=x", "application/x-ndjson", bearer, good, []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden, ""},
		{"priority out of range", base + "/api/batches?batch=x&priority=9", "application/x-ndjson", bearer, good, nil, http.StatusBadRequest, "query parameter priority: 9: want 1 (first) to 5 (last)"},
		{"priority 0", base + "/api/batches?batch=x&priority=0", "application/x-ndjson", bearer, good, nil, http.StatusBadRequest, "query parameter priority: 0"},
		{"weight not a number", base + "/api/batches?batch=x&weight=2.5", "application/x-ndjson", bearer, good, nil, http.StatusBadRequest, "query parameter weight"},
		{"unknown kind", base + "/api/batches?batch=x&kind=nope", "application/x-ndjson", bearer, good, nil, http.StatusBadRequest, "query parameter kind: unknown job kind"},
		{"unknown parameter", base + "/api/batches?batch=x&prio=1", "application/x-ndjson", bearer, good, nil, http.StatusBadRequest, `unknown query parameter`},
		{"bad lines", base + "/api/batches?batch=x", "application/x-ndjson", bearer, good + `{"id":"doc-3"}` + "\nnot json\n", nil, http.StatusBadRequest, `duplicate ID (first on line 4)`},
		{"over the bound", base + "/api/batches?batch=x", "application/x-ndjson", bearer, items(3000, `{"id":"big-%d","pad":"xxxxxxxxxxxxxxxxxxxx"}`), nil, http.StatusRequestEntityTooLarge, "--max-body"},
	} {
		code, resp := post(t, rec, tc.url, tc.contentType, tc.auth, tc.body, tc.hdr...)
		if code != tc.code || !strings.Contains(resp, tc.says) {
			t.Errorf("%s: want %d saying %q, got %d %s", tc.name, tc.code, tc.says, code, resp)
		}
	}
	// A body of unknown length (chunked) over the bound: 413 too.
	chunked, _ := http.NewRequest(http.MethodPost, base+"/api/batches?batch=x",
		io.MultiReader(strings.NewReader(items(3000, `{"id":"big-%d","pad":"xxxxxxxxxxxxxxxxxxxx"}`))))
	chunked.Header.Set("Content-Type", "application/x-ndjson")
	chunked.Header.Set("Authorization", bearer)
	if code, resp := rec.do(t, chunked); code != http.StatusRequestEntityTooLarge || !strings.Contains(resp, "nothing was enqueued") {
		t.Errorf("a chunked body over the bound: want 413, got %d %s", code, resp)
	}
	// The bad lines are named, with the line an ID was first on.
	code, r := enq("batch=x", "application/x-ndjson", bearer, good+`{"id":"doc-3"}`+"\nnot json\n")
	if code != http.StatusBadRequest || r.BadLines != 2 || len(r.Problems) != 2 || r.Problems[0].Line != 11 || r.Problems[0].FirstLine != 4 || r.Problems[1].Line != 12 {
		t.Errorf("bad lines: want lines 11 (first on 4) and 12, got %d %+v", code, r)
	}
	if code, body := rec.get(t, base+"/api/batches/x"); code != http.StatusNotFound {
		t.Fatalf("after every refusal batch x must not exist: %d %s", code, body)
	}

	// A good body, in a batch whose ID needs escaping.
	batch := "api/1 ü"
	code, r = enq("batch="+url.QueryEscape(batch)+"&priority=2&weight=3", "application/x-ndjson; charset=utf-8", bearer, good)
	if code != http.StatusOK || r.Batch != batch || r.Items != 10 || r.New != 10 || r.Duplicates != 0 || r.Priority != 2 || r.Weight != 3 {
		t.Fatalf("enqueue: want 10 new items in %q at priority 2, weight 3; got %d %+v", batch, code, r)
	}
	code, r = enq("batch="+url.QueryEscape(batch), "application/x-ndjson", bearer, good)
	if code != http.StatusOK || r.New != 0 || r.Duplicates != 10 || r.Priority != 2 {
		t.Fatalf("the same again: want 10 duplicates, priority kept; got %d %+v", code, r)
	}
	var b dashboard.Batch
	batchURL := base + "/api/batches/" + url.PathEscape(batch)
	testutil.WaitFor(t, "batch "+batch+" done", 60*time.Second, func() bool {
		code, body := rec.get(t, batchURL)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", batchURL, code, body)
		}
		b = dashboard.Batch{}
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatal(err)
		}
		if b.Total != 10 || b.Priority != 2 || b.Weight != 3 || b.Kind != "exec" {
			t.Fatalf("right after the enqueue: want 10 exec items at priority 2, weight 3; got %+v", b)
		}
		return b.Done == 10
	})
	if b.ID != batch || b.State != "done" || b.Succeeded != 10 || b.Failed != 0 || b.Cancelled != 0 {
		t.Errorf("done: want state done, 10 succeeded; got %+v", b)
	}
	_, raw := rec.get(t, batchURL)
	for _, key := range []string{"id", "kind", "priority", "weight", "state", "total", "done", "succeeded", "failed", "cancelled"} {
		if !strings.Contains(raw, `"`+key+`":`) {
			t.Errorf("the batch object lacks %q: %s", key, raw)
		}
	}

	// The results: the token, then exactly what `producer results` writes.
	resultsURL := batchURL + "/results"
	if code, _ := rec.get(t, resultsURL); code != http.StatusUnauthorized {
		t.Errorf("results without the token: want 401, got %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, resultsURL, nil)
	req.Header.Set("Authorization", bearer)
	code, body := rec.do(t, req)
	var want bytes.Buffer
	if _, err := e.q.WriteResults(e.ctx, batch, &want); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || body != want.String() || strings.Count(body, "\n") != 10 {
		t.Errorf("results: want the 10 lines of producer results, got %d\n%s", code, body)
	}

	// Two identical POSTs at once add each item once.
	const n = 2000
	same := items(n, `{"id":"same-%d","ms":0}`)
	var wg sync.WaitGroup
	replies := make([]enqueueReply, 2)
	codes := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, base+"/api/batches?batch=twice", strings.NewReader(same))
			req.Header.Set("Content-Type", "application/x-ndjson")
			req.Header.Set("Authorization", bearer)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			codes[i] = resp.StatusCode
			_ = json.NewDecoder(resp.Body).Decode(&replies[i])
		}()
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 || replies[0].New+replies[1].New != n ||
		replies[0].Items != n || replies[1].Items != n || replies[0].New+replies[0].Duplicates != n {
		t.Fatalf("two POSTs at once: want %d new in all, got %v %+v", n, codes, replies)
	}
	if rec, err := e.q.Batch(e.ctx, "twice"); err != nil || rec.Total != n {
		t.Fatalf("batch twice: want a total of %d, got %+v %v", n, rec, err)
	}

	if code, _ := rec.get(t, base+"/api/batches/never"); code != http.StatusNotFound {
		t.Errorf("unknown batch: want 404, got %d", code)
	}
	rec.scan(t, e.sensitive(token))
}
