package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

const token = "admin-0123456789abcdef"

// serve mounts an API with token (and ReadBatches: no collector) on a
// test server of its own NATS and Redis, with keys key-a and key-b.
func serve(t *testing.T, token string) (*httptest.Server, *queue.Queue) {
	t.Helper()
	return serveWith(t, func(_ *redistest.Server, o *api.Options) { o.AdminToken = token })
}

// serveWith is serve with the options edit sets (it is given the test's
// Redis server; Queue and Pool are set here).
func serveWith(t *testing.T, edit func(rs *redistest.Server, o *api.Options)) (*httptest.Server, *queue.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	nc := natstest.Connect(t, natstest.Start(t).URL())
	q, err := queue.Open(ctx, nc, queue.Config{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	pool, err := creds.New(rs.Client(t), "api-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	if err := pool.Register(ctx, []creds.Credential{{ID: "key-a", MaxConcurrent: 1}, {ID: "key-b", MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	o := api.Options{Queue: q, Pool: pool}
	edit(rs, &o)
	a, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, q
}

// call sends method url with body (its type by its first byte: JSON or
// JSON Lines) and the admin token when auth, and returns the status and
// the body.
func call(t *testing.T, method, url, body string, auth bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		ct := "application/json"
		if strings.Contains(body, "\n") {
			ct = "application/x-ndjson"
		}
		req.Header.Set("Content-Type", ct)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The API alone (no dashboard): each action answers as the CLI's runs it,
// its errors' statuses by their class; writes need the token.
func TestAPIAlone(t *testing.T) {
	srv, q := serve(t, token)
	u := srv.URL
	for _, c := range []struct {
		name, method, path, body string
		auth                     bool
		code                     int
		says                     string
	}{
		{"unknown batch", "GET", "/api/batches/nope", "", false, http.StatusNotFound, "no batch nope"},
		{"pause without the token", "POST", "/api/batches/b1/pause", "", false, http.StatusUnauthorized, "needs the admin token"},
		{"enqueue", "POST", "/api/batches?kind=sleep&batch=b1", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n", true, http.StatusOK, `"new":3`},
		{"a bad line", "POST", "/api/batches?kind=sleep&batch=b2", "{\"id\":\"a\"}\nnot json\n", true, http.StatusBadRequest, `"bad_lines":1`},
		{"an unknown parameter", "POST", "/api/batches?kind=sleep&nope=1", "{\"id\":\"a\"}\n", true, http.StatusBadRequest, "unknown query parameter"},
		{"the batch", "GET", "/api/batches/b1", "", false, http.StatusOK, `"total":3`},
		{"pause", "POST", "/api/batches/b1/pause", "", true, http.StatusOK, `"state":"paused"`},
		{"pause again", "POST", "/api/batches/b1/pause", "", true, http.StatusConflict, "batch b1 is paused already"},
		{"pause an unknown batch", "POST", "/api/batches/nope/pause", "", true, http.StatusNotFound, "no batch nope"},
		{"cancel", "POST", "/api/batches/b1/cancel", "{}", true, http.StatusOK, `"drained":3`},
		{"resume a cancelled batch", "POST", "/api/batches/b1/resume", "", true, http.StatusConflict, "batch b1 is cancelled (by dashboard@127.0.0.1"},
		{"enqueue into a cancelled batch", "POST", "/api/batches?kind=sleep&batch=b1", "{\"id\":\"d\"}\n", true, http.StatusConflict, "is cancelled"},
		{"the results", "GET", "/api/batches/b1/results", "", true, http.StatusOK, `"outcome":"cancelled"`},
		{"an item", "GET", "/api/batches/b1/items/a", "", false, http.StatusOK, `"state":"cancelled"`},
		{"an unknown item", "GET", "/api/batches/b1/items/zz", "", false, http.StatusNotFound, `no item \"zz\" in batch \"b1\"`},
		{"disable", "POST", "/api/creds/disable", `{"id":"key-a"}`, true, http.StatusOK, `"reason":"disabled from the dashboard"`},
		{"enable an unknown key", "POST", "/api/creds/enable", `{"id":"key-zz"}`, true, http.StatusNotFound, "(it has: key-a, key-b)"},
		{"enable without an id", "POST", "/api/creds/enable", `{}`, true, http.StatusBadRequest, `\"id\" is required`},
		{"replay an unknown item", "POST", "/api/dlq/replay", `{"batch":"b1","items":["zz"]}`, true, http.StatusNotFound, `no dead letter for \"zz\" in batch b1`},
		{"replay a bad batch ID", "POST", "/api/dlq/replay", `{"batch":"a\nb"}`, true, http.StatusBadRequest, "line break"},
		{"replay nothing", "POST", "/api/dlq/replay", `{}`, true, http.StatusOK, `"replayed":0`},
	} {
		code, body := call(t, c.method, u+c.path, c.body, c.auth)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: want %d saying %s, got %d %s", c.name, c.code, c.says, code, body)
		}
	}
	var b struct {
		State     string `json:"state"`
		Cancelled int    `json:"cancelled"`
	}
	_, body := call(t, "GET", u+"/api/batches/b1", "", false)
	if err := json.Unmarshal([]byte(body), &b); err != nil || b.State != string(kftype.BatchCancelled) || b.Cancelled != 3 {
		t.Errorf("b1 after its cancel: want cancelled, 3 cancelled; got %+v %v", b, err)
	}
	if rec, err := q.Batch(context.Background(), "b1"); err != nil || len(rec.History) != 2 || rec.History[0].By != "dashboard@127.0.0.1" {
		t.Errorf("b1's record: %+v %v", rec, err)
	}

	ro, _ := serve(t, "")
	if code, body := call(t, "POST", ro.URL+"/api/creds/enable", `{"id":"key-a"}`, true); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("a write to a read-only API: want 403, got %d %s", code, body)
	}
}
