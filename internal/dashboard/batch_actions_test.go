package dashboard_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

type actionReply struct {
	dashboard.Batch
	Drained *int   `json:"drained"`
	Warning string `json:"warning"`
	Error   string `json:"error"`
}

// waitingItems are n items of batch that each sleep ms.
func waitingItems(prefix string, n, ms int) map[string]string {
	out := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		out[id] = fmt.Sprintf(`{"id":%q,"ms":%d}`, id, ms)
	}
	return out
}

// Pause, resume and cancel over HTTP: behind the admin token and the
// cross-site checks, 404 for an unknown batch, 409 for a change that does
// not apply, 200 with the batch object otherwise; each is recorded (who,
// when) and steers the real fleet: a paused batch does not start while
// another runs, resumed it finishes, cancelled its items are reported as
// cancelled and leave the stream.
func TestBatchActions(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	bearer := "Bearer " + token
	base := e.startDashboardWith(dashboard.Options{AdminToken: token})
	readOnly := e.startDashboardWith(dashboard.Options{})
	rec := &recorder{}
	// No worker yet: the items wait.
	e.enqueue("steer", "exec", waitingItems("s", 5, 10))
	e.enqueue("held", "exec", waitingItems("h", 4, 10))
	action := func(batch, act string) (int, actionReply) {
		t.Helper()
		code, body := post(t, rec, base+"/api/batches/"+url.PathEscape(batch)+"/"+act, "", bearer, "")
		var r actionReply
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s %s: not JSON: %v\n%s", act, batch, err, body)
		}
		return code, r
	}
	record := func(batch string) kftype.BatchInfo {
		t.Helper()
		b, err := e.q.Batch(e.ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// Refused before anything changes.
	pause := base + "/api/batches/steer/pause"
	for _, tc := range []struct {
		name, url, contentType, auth, body string
		hdr                                []string
		code                               int
	}{
		{"read-only", readOnly + "/api/batches/steer/pause", "", bearer, "", nil, http.StatusForbidden},
		{"no token", pause, "", "", "", nil, http.StatusUnauthorized},
		{"wrong token", pause, "", "Bearer " + strings.Repeat("x", len(token)), "", nil, http.StatusUnauthorized},
		{"token as basic auth", pause, "", "Basic " + token, "", nil, http.StatusUnauthorized},
		{"cross-site", pause, "application/json", bearer, "{}", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"another origin", pause, "", bearer, "", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"a form post", pause, "application/x-www-form-urlencoded", bearer, "a=1", nil, http.StatusUnsupportedMediaType},
		{"plain text", pause, "text/plain", bearer, "", nil, http.StatusUnsupportedMediaType},
		{"a body", pause, "application/json", bearer, `{"reason":"x"}`, nil, http.StatusBadRequest},
		{"resume a running batch", base + "/api/batches/steer/resume", "", bearer, "", nil, http.StatusConflict},
		{"unknown batch", base + "/api/batches/nope/pause", "", bearer, "", nil, http.StatusNotFound},
		{"unknown batch, resume", base + "/api/batches/nope/resume", "", bearer, "", nil, http.StatusNotFound},
		{"unknown batch, cancel", base + "/api/batches/nope/cancel", "", bearer, "", nil, http.StatusNotFound},
		{"unknown action", base + "/api/batches/steer/stop", "", bearer, "", nil, http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodPost, tc.url, strings.NewReader(tc.body))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		if code, body := rec.do(t, req); code != tc.code {
			t.Errorf("%s: want %d, got %d %s", tc.name, tc.code, code, body)
		}
	}
	if b := record("steer"); b.State != kftype.BatchRunning || len(b.History) != 0 {
		t.Fatalf("a refused action changed the record: %+v", b)
	}

	// Pause, pause again (409), resume, resume again (409): each change is
	// in the record with who made it.
	code, r := action("steer", "pause")
	if code != http.StatusOK || r.ID != "steer" || r.State != batchview.StatePaused || r.Total != 5 || r.Priority != 3 || r.Weight != 1 ||
		len(r.History) != 1 || r.History[0].Action != kftype.ActionPause || r.History[0].By != "dashboard@127.0.0.1" {
		t.Fatalf("pause: want 200 and batch steer paused by dashboard@127.0.0.1, got %d %+v", code, r)
	}
	if b := record("steer"); b.State != kftype.BatchPaused || len(b.History) != 1 || b.History[0].By != "dashboard@127.0.0.1" ||
		time.Since(b.History[0].At) > time.Minute {
		t.Fatalf("the record after pause: %+v", b)
	}
	if code, r := action("steer", "pause"); code != http.StatusConflict || !strings.Contains(r.Error, "paused already") {
		t.Errorf("pause a paused batch: want 409, got %d %+v", code, r)
	}
	if code, r := action("steer", "resume"); code != http.StatusOK || r.State != batchview.StateRunning || len(r.History) != 2 || r.History[1].Action != kftype.ActionResume {
		t.Errorf("resume: want 200 running, got %d %+v", code, r)
	}
	if code, _ := action("steer", "resume"); code != http.StatusConflict {
		t.Errorf("resume a running batch: want 409, got %d", code)
	}
	// Pausing accepts an empty JSON object, as the page sends it.
	if code, body := post(t, rec, pause, "application/json", bearer, "{}"); code != http.StatusOK {
		t.Errorf("pause with {}: want 200, got %d %s", code, body)
	}

	// Cancel (from paused): the items not started are recorded as
	// cancelled and their messages deleted before the answer.
	code, r = action("steer", "cancel")
	if code != http.StatusOK || r.State != batchview.StateCancelled || r.Drained == nil || *r.Drained != 5 || r.Warning != "" {
		t.Fatalf("cancel: want 200, cancelled, 5 drained; got %d %+v drained %v", code, r, r.Drained)
	}
	if b := record("steer"); b.State != kftype.BatchCancelled || len(b.History) != 4 || b.History[3].Action != kftype.ActionCancel {
		t.Fatalf("the record after cancel: %+v", b)
	}
	var results bytes.Buffer
	if _, err := e.q.WriteResults(e.ctx, "steer", &results); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(results.String(), `"outcome":"cancelled"`); n != 5 {
		t.Errorf("want 5 cancelled results, got %d:\n%s", n, results.String())
	}
	if drained, unacked, err := e.q.DrainCancelled(e.ctx, "steer", "test"); err != nil || drained != 0 || unacked != 0 {
		t.Errorf("after the cancel, the batch's messages must be gone: drained %d more, %d unacked, %v", drained, unacked, err)
	}
	for _, act := range []string{"pause", "resume", "cancel"} {
		if code, r := action("steer", act); code != http.StatusConflict || !strings.Contains(r.Error, "cancelled") {
			t.Errorf("%s a cancelled batch: want 409, got %d %+v", act, code, r)
		}
	}
	if b := record("steer"); len(b.History) != 4 {
		t.Errorf("a refused change was recorded: %+v", b.History)
	}
	var row dashboard.Batch
	testutil.WaitForEvery(t, "batch steer cancelled with 5 cancelled items in /api/status", 30*time.Second, 100*time.Millisecond, func() bool {
		for _, b := range snapshot(t, rec, base).Batches {
			if b.ID == "steer" {
				row = b
				return b.Cancelled == 5
			}
		}
		return false
	})
	if row.State != batchview.StateCancelled || row.Done != 5 || len(row.History) != 4 || row.History[3].Action != kftype.ActionCancel {
		t.Errorf("the row of steer: want cancelled, 5 done, last change cancel; got %+v", row)
	}

	// The fleet obeys: held is paused before a worker starts; another
	// batch runs to done while held waits; resumed, held finishes.
	if code, r := action("held", "pause"); code != http.StatusOK || r.State != batchview.StatePaused {
		t.Fatalf("pause held: %d %+v", code, r)
	}
	e.startWorker("w1")
	e.enqueue("finished", "exec", waitingItems("f", 3, 5))
	batch := func(id string) dashboard.Batch {
		t.Helper()
		code, body := rec.get(t, base+"/api/batches/"+id)
		var b dashboard.Batch
		if code != http.StatusOK || json.Unmarshal([]byte(body), &b) != nil {
			t.Fatalf("GET batch %s: %d %s", id, code, body)
		}
		return b
	}
	testutil.WaitForEvery(t, "batch finished done", 60*time.Second, 100*time.Millisecond, func() bool { return batch("finished").Done == 3 })
	// Its last result is stored a moment before its message is acked: the
	// steering rule (ops.Done) holds it done only once no message is left.
	testutil.WaitForEvery(t, "batch finished done, no message left", 10*time.Second, 20*time.Millisecond, func() bool {
		_, done, err := ops.Done(e.ctx, e.q, record("finished"))
		return err == nil && done
	})
	if b := batch("held"); b.Done != 0 || b.State != batchview.StatePaused {
		t.Errorf("held ran while paused: %+v", b)
	}
	for _, act := range []string{"pause", "cancel"} {
		if code, r := action("finished", act); code != http.StatusConflict || !strings.Contains(r.Error, "done") {
			t.Errorf("%s a done batch: want 409 saying done, got %d %+v", act, code, r)
		}
	}
	if b := record("finished"); b.State != kftype.BatchRunning || len(b.History) != 0 {
		t.Errorf("a refused change of a done batch changed its record: %+v", b)
	}
	if code, r := action("held", "resume"); code != http.StatusOK || r.State != batchview.StateRunning {
		t.Fatalf("resume held: %d %+v", code, r)
	}
	testutil.WaitForEvery(t, "batch held done after its resume", 60*time.Second, 100*time.Millisecond, func() bool {
		b := batch("held")
		return b.Done == 4 && b.Succeeded == 4 && b.State == "done"
	})
	rec.scan(t, e.sensitive(token))
}
