package worker

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// statusReport runs `producer status --json` and reads it as the status
// package writes it.
func statusReport(f *e2etest.Fleet) status.Report {
	f.T.Helper()
	r := f.Producer(nil, "status", "--json")
	var rep status.Report
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rep) != nil {
		f.T.Fatalf("status --json: %s", r)
	}
	return rep
}

func credential(rep status.Report, id string) status.Credential {
	for _, c := range rep.Pool.Credentials {
		if c.ID == id {
			return c
		}
	}
	return status.Credential{}
}

// Limits through the binaries: several limits per key from the config
// file, costs read by enqueue from the items, real costs reported by the
// job, an item that can never fit dead-lettered at once naming the key and
// the limit, the limits and their use in status, and a live change.
func TestLimitsEndToEnd(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2, limits: [{rate: 50/s, burst: 2}, {cost: 400/2s}]}
- {id: key-b, secret_env: KEY_B, max_concurrent: 1, limits: [{cost: 450/m}, {rate: 100/m}]}`,
		Pool:   "cost: {field: tokens, default: 10}",
		Worker: "concurrency: 3",
		Jobs: `exec:
  command: ["{{dir}}/job.sh"]
  timeout: 1m`,
		Env: []string{"KEY_A=sk-a-secret-1111", "KEY_B=sk-b-secret-2222"},
	})
	// The job reports what the item really cost: its "used" field.
	f.WriteScript("job.sh", `used=$(sed -n 's/.*"used":\([0-9]*\).*/\1/p')
echo "Cost: ${used:-1}" >&2
echo ok
`)
	var items strings.Builder
	for i := range 24 {
		fmt.Fprintf(&items, `{"id":"i%02d","tokens":40,"used":25}`+"\n", i)
	}
	items.WriteString(`{"id":"huge","tokens":500,"used":500}` + "\n")
	items.WriteString(`{"id":"nocost","used":3}` + "\n")
	file := f.WriteInput("items.jsonl", items.String())
	bad := f.WriteInput("bad.jsonl", `{"id":"x","tokens":"many"}`+"\n")
	if r := f.Producer(nil, "enqueue", "--kind", "exec", bad); r.Code != 2 || !strings.Contains(r.Stderr, `line 1`) || !strings.Contains(r.Stderr, `field "tokens" is a string`) {
		t.Fatalf("a bad cost must be refused with its line:\n%s", r)
	}

	w := f.StartWorker("w1")
	r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "lim", "--wait", file)
	if r.Code != 1 || !strings.Contains(r.Stdout, "Succeeded: 25") || !strings.Contains(r.Stdout, "Failed: 1") {
		t.Fatalf("want 25 done and the huge item failed:\n%s", r)
	}
	dl := f.Producer(nil, "dlq", "list", "--json")
	if !strings.Contains(dl.Stdout, `"huge"`) || !strings.Contains(dl.Stdout, "credential key-b cost=450/m") {
		t.Fatalf("the item that never fits must be dead-lettered naming the key and the limit:\n%s", dl)
	}

	rep := statusReport(f)
	a, b := credential(rep, "key-a"), credential(rep, "key-b")
	if len(a.Limits) != 2 || a.Limits[0].Limit != "rate=50/s,burst=2" || a.Limits[0].Kind != "smooth" ||
		a.Limits[1].Limit != "cost=400/2s" || a.Limits[1].Of != 400 || len(b.Limits) != 2 || b.Limits[1].Kind != "rate" ||
		b.Limits[0].Of != 450 {
		t.Fatalf("status limits: key-a %+v, key-b %+v", a.Limits, b.Limits)
	}
	// key-b's minute-long cost window holds the real costs its items
	// reported (25, and 3 for the item without an estimate), not their
	// estimates (40 and the default 10).
	var real int64
	for id, r := range f.WaitResults("lim", 26, time.Minute) {
		if r.CredentialID == "key-b" {
			real += map[bool]int64{true: 3, false: 25}[id == "nocost"]
		}
	}
	if b.Limits[0].Used != real || real == 0 {
		t.Errorf("key-b's cost window holds %d, its items reported %d", b.Limits[0].Used, real)
	}
	text := f.Producer(nil, "status").Stdout
	if !strings.Contains(text, "rate=50/s,burst=2") || !strings.Contains(text, "cost=400/2s") {
		t.Fatalf("status text lacks the limits:\n%s", text)
	}

	// A live change, seen by status at once.
	if r := f.Producer(nil, "creds", "set", "key-b", "--limit", "rate=5/s,burst=1", "--limit", "cost=1000/m"); r.Code != 0 {
		t.Fatalf("creds set --limit: %s", r)
	}
	if r := f.Producer(nil, "creds", "set", "key-b", "--limit", "cost=5/x"); r.Code != 2 || !strings.Contains(r.Stderr, "cost=5/x") {
		t.Fatalf("a bad --limit must be refused naming it: %s", r)
	}
	if c := credential(statusReport(f), "key-b"); len(c.Limits) != 2 || c.Limits[0].Limit != "rate=5/s,burst=1" || c.Limits[1].Limit != "cost=1000/m" {
		t.Fatalf("after creds set: %+v", c.Limits)
	}
	e2etest.StopWorkers(t, 30*time.Second, w)
}

// The API's own signals pace keys nobody configured, through the http
// kind: a gateway answering bare 429s teaches the fleet a pace (the first
// 429 does not rest the key for the default 60 s cooldown), and OpenAI's
// headers rest a key until their reset; status names each cause.
func TestPacingEndToEnd(t *testing.T) {
	api, err := fakeapi.New(fakeapi.Config{Keys: []fakeapi.Key{
		{Secret: "sk-gw-1111", Every: 40 * time.Millisecond, BareRateLimit: true},
		{Secret: "sk-hd-2222", Rate: ratelimit.Limit{N: 3, Period: 2 * time.Second}, RateHeaders: "openai"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: gateway, secret_env: KEY_GW, max_concurrent: 2}
- {id: headers, secret_env: KEY_HD, max_concurrent: 2}`,
		Worker: "concurrency: 4",
		Jobs:   fmt.Sprintf("http:\n  url: %s/v1/do\n  timeout: 10s", srv.URL),
		Env:    []string{"KEY_GW=sk-gw-1111", "KEY_HD=sk-hd-2222"},
	})
	const n = 80
	f.Publish("pace", "http", n, e2etest.ItemJSON)
	w := f.StartWorker("w1")
	var sawPace, sawHeaderRest bool
	var causes []string
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && !(sawPace && sawHeaderRest) {
		rep := statusReport(f)
		if c := credential(rep, "gateway"); c.PaceMS > 0 {
			sawPace = true
		}
		if c := credential(rep, "headers"); c.RestCause != "" {
			causes = append(causes, c.RestCause)
			sawHeaderRest = sawHeaderRest || c.RestCause == "x-ratelimit-remaining-requests"
		}
		time.Sleep(100 * time.Millisecond)
	}
	res := f.WaitResults("pace", n, 2*time.Minute)
	for id, r := range res {
		if r.Outcome != "succeeded" {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	st := api.Stats()
	if !sawPace || !sawHeaderRest {
		t.Fatalf("status never showed the gateway's learnt pace (%v) or a rest from x-ratelimit headers (%v, causes seen %q); API: %+v",
			sawPace, sawHeaderRest, causes, st)
	}
	if hd := st.Keys[1]; hd.RateLimited > 2 {
		t.Errorf("the headers key got %d 429s: its headers should rest it before them", hd.RateLimited)
	}
	if st.OverLimit() != 0 {
		t.Fatalf("the API admitted requests over a key's limits: %+v", st)
	}
	e2etest.StopWorkers(t, 30*time.Second, w)
	t.Logf("API: gateway %d ok / %d 429s; headers %d ok / %d 429s", st.Keys[0].OK, st.Keys[0].RateLimited, st.Keys[1].OK, st.Keys[1].RateLimited)
}
