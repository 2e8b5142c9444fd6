package fallback

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The keys: two of OpenAI's (group openai), two of an Azure resource
// (group azure). Each stand-in knows its own.
var (
	openAIKeys = []string{"sk-oa-primary-1-7f3a9c", "sk-oa-primary-2-1b2e4d"}
	azureKeys  = []string{"az-east-key-1-5c6d7e8f", "az-east-key-2-9a0b1c2d"}
)

// after is the kinds' fallback.after in these tests, but for
// TestPrimaryDownRunsOnTheFallback's (downAfter).
const after = 2 * time.Second

// downAfter is the fallback's after when the primary's API is down: long
// enough that no item of that test waits for it however loaded the
// machine (24 items on 4 of the primary's slots), so that each moves for
// its failures.
const downAfter = 60 * time.Second

// setup is a fleet whose kind chat (provider openai, at primary) falls
// back to chat-azure (openai-compatible, at backup), and its worker's
// /metrics address.
type setup struct {
	f       *e2etest.Fleet
	metrics string
}

func newSetup(t *testing.T, primary, backup string) setup {
	t.Helper()
	return newSetupAfter(t, primary, backup, after)
}

// newSetupAfter is newSetup with the fallback's after.
func newSetupAfter(t *testing.T, primary, backup string, after time.Duration) setup {
	t.Helper()
	metrics := testutil.FreeAddr(t)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: oa-1, secret_env: OA_1, groups: [openai], max_concurrent: 2}\n" +
			"- {id: oa-2, secret_env: OA_2, groups: [openai], max_concurrent: 2}\n" +
			"- {id: az-1, secret_env: AZ_1, groups: [azure], max_concurrent: 2}\n" +
			"- {id: az-2, secret_env: AZ_2, groups: [azure], max_concurrent: 2}",
		Worker: "concurrency: 6\nretry_backoff: [100ms]\nlisten: " + metrics,
		Jobs: fmt.Sprintf("kinds:\n"+
			"  chat:\n    http: {provider: openai, url: %q}\n    credentials: [openai]\n    fallback: {kinds: [chat-azure], after: %s}\n"+
			"  chat-azure:\n    http: {provider: openai-compatible, url: %q}\n    credentials: [azure]", primary, after, backup),
		Env: []string{"OA_1=" + openAIKeys[0], "OA_2=" + openAIKeys[1], "AZ_1=" + azureKeys[0], "AZ_2=" + azureKeys[1]},
	})
	return setup{f: f, metrics: metrics}
}

// standIn is a strict OpenAI stand-in knowing secrets, recording what
// reaches it, served on l (nil: a fresh port).
func standIn(t *testing.T, secrets []string, l net.Listener) (*fakeapi.Server, *httptest.Server) {
	t.Helper()
	var keys []fakeapi.Key
	for _, s := range secrets {
		keys = append(keys, fakeapi.Key{Secret: s})
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Record: true, Keys: keys, Latency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api)
	if l != nil {
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return api, srv
}

// closedAddr is an address nothing listens on: a connection to it is
// refused, as an API that is down refuses it.
func closedAddr(t *testing.T) string {
	t.Helper()
	return testutil.FreeAddr(t)
}

// chatLines are n chat requests, their IDs prefix-NNNN.
func chatLines(n int, prefix string) (string, map[string]string) {
	var b strings.Builder
	bodies := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Question %s: summarise the news."}],"max_tokens":16}`, id)
		bodies[id] = body
		fmt.Fprintf(&b, `{"id":%q,%s`+"\n", id, body[1:])
	}
	return b.String(), bodies
}

// runBatch enqueues n chat items as batch id and waits for them; every
// item must succeed.
func (s setup) runBatch(id string, n int) map[string]string {
	s.f.T.Helper()
	lines, bodies := chatLines(n, id)
	path := s.f.WriteInput(id+".jsonl", lines)
	if r := s.f.Producer(nil, "enqueue", "--kind", "chat", "--batch", id, "--wait", path); r.Code != 0 {
		s.f.T.Fatalf("enqueue --wait:\n%s", r)
	}
	return bodies
}

// results are batch id's results by item, as `producer results` prints
// them.
func (s setup) results(id string) map[string]kftype.Result {
	s.f.T.Helper()
	r := s.f.Producer(nil, "results", "--batch", id)
	if r.Code != 0 {
		s.f.T.Fatalf("results:\n%s", r)
	}
	out := map[string]kftype.Result{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var res kftype.Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			s.f.T.Fatalf("results line %q: %v", line, err)
		}
		if _, dup := out[res.Item]; dup {
			s.f.T.Errorf("item %s has two result lines", res.Item)
		}
		out[res.Item] = res
	}
	return out
}

// checkRanOn: every item of bodies succeeded on kind, on one of keys,
// moved from chat for why ("" it did not move).
func checkRanOn(t *testing.T, res map[string]kftype.Result, bodies map[string]string, kind, why string, keys ...string) {
	t.Helper()
	if len(res) != len(bodies) {
		t.Errorf("%d results for %d items", len(res), len(bodies))
	}
	for id := range bodies {
		r, ok := res[id]
		from := ""
		if why != "" {
			from = "chat"
		}
		switch {
		case !ok:
			t.Errorf("item %s: no result (lost)", id)
		case r.Outcome != kftype.OutcomeSucceeded || r.Kind != kind || !contains(keys, r.CredentialID) ||
			r.FallbackFrom != from || r.FallbackReason != why:
			t.Errorf("item %s: %s on kind %q key %q (from %q, %q); want succeeded on %s, a key of %v, from %q, %q",
				id, r.Outcome, r.Kind, r.CredentialID, r.FallbackFrom, r.FallbackReason, kind, keys, from, why)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// checkSentOnce: each body reached api exactly once (each item ran once),
// with a key the stand-in knows, and nothing else did.
func checkSentOnce(t *testing.T, api *fakeapi.Server, bodies map[string]string) {
	t.Helper()
	count := map[string]int{}
	for _, r := range api.Received() {
		count[string(r.Body)]++
		if r.KeyIndex < 0 {
			t.Errorf("a request with a key the stand-in does not know: %s %s", r.Method, r.Path)
		}
	}
	for id, b := range bodies {
		if count[b] != 1 {
			t.Errorf("item %s: its request reached the API %d times, want once", id, count[b])
		}
		delete(count, b)
	}
	for b, n := range count {
		t.Errorf("the API got %d requests that are no item's of this batch: %.200s", n, b)
	}
}

// batchFallbacks is `batch show ID --json`'s fallbacks.
func (s setup) batchFallbacks(id string) []kftype.FallbackCount {
	s.f.T.Helper()
	r := s.f.Producer(nil, "batch", "show", id, "--json")
	var b struct {
		Fallbacks []kftype.FallbackCount `json:"fallbacks"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &b) != nil || b.Fallbacks == nil {
		s.f.T.Fatalf("batch show --json (fallbacks):\n%s", r)
	}
	return b.Fallbacks
}

// waitCounted waits until status --json and the worker's /metrics count
// want items of chat that ran on chat-azure for why.
func (s setup) waitCounted(why string, want int) {
	s.f.T.Helper()
	testutil.WaitFor(s.f.T, fmt.Sprintf("status --json to count %d fallbacks (%s)", want, why), 30*time.Second, func() bool {
		st, _ := s.f.StatusJSON()
		for _, c := range st.Fallbacks {
			if c.Kind == "chat" && c.To == "chat-azure" && c.Why == why {
				return c.Items == int64(want)
			}
		}
		return false
	})
	metric := regexp.MustCompile(`(?m)^keyfleet_fallbacks_total\{kind="chat",to="chat-azure",why="` + why + `"\} (\d+)$`)
	code, body, err := e2etest.GetURL("http://" + s.metrics + "/metrics")
	m := metric.FindStringSubmatch(body)
	if code != http.StatusOK || err != nil || m == nil || m[1] != strconv.Itoa(want) {
		s.f.T.Errorf("/metrics: %d %v; keyfleet_fallbacks_total{kind=chat,to=chat-azure,why=%s}: %v, want %d", code, err, why, m, want)
	}
}

// docs/providers.md, "Fallbacks": the primary API is down (a refused
// connection): every item's runs fail on two of its kind's keys, and it
// runs on the fallback kind in place: the batch finishes there, no item
// lost, each request sent to the fallback API once. Once the API is back,
// new items run on their own kind again.
func TestPrimaryDownRunsOnTheFallback(t *testing.T) {
	primaryAddr := closedAddr(t)
	backup, backupSrv := standIn(t, azureKeys, nil)
	s := newSetupAfter(t, "http://"+primaryAddr, backupSrv.URL, downAfter)
	s.f.StartWorker("w1")

	const n = 24
	bodies := s.runBatch("down", n)
	checkRanOn(t, s.results("down"), bodies, "chat-azure", kftype.FallbackFailing, "az-1", "az-2")
	checkSentOnce(t, backup, bodies)
	want := []kftype.FallbackCount{{Kind: "chat", To: "chat-azure", Why: kftype.FallbackFailing, Items: n}}
	if got := s.batchFallbacks("down"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("batch show --json fallbacks: got %+v, want %+v", got, want)
	}
	s.waitCounted(kftype.FallbackFailing, n)

	// The API is back, on the same address: new items run on chat.
	l, err := net.Listen("tcp", primaryAddr)
	if err != nil {
		t.Fatalf("listening on the primary's address again: %v", err)
	}
	primary, _ := standIn(t, openAIKeys, l)
	bodies = s.runBatch("back", 12)
	checkRanOn(t, s.results("back"), bodies, "chat", "", "oa-1", "oa-2")
	checkSentOnce(t, primary, bodies)
	if got := s.batchFallbacks("back"); len(got) != 0 {
		t.Errorf("batch show --json fallbacks of the batch run on its own kind: %+v", got)
	}
}

// docs/providers.md, "Fallbacks": every key of the primary kind disabled
// (an operator's `creds disable`): its items wait the fallback's after
// for one, then run on the fallback kind. Enabled again, its keys take
// the new items.
func TestPrimaryKeysDisabledRunOnTheFallbackAfterTheWait(t *testing.T) {
	primary, primarySrv := standIn(t, openAIKeys, nil)
	backup, backupSrv := standIn(t, azureKeys, nil)
	s := newSetup(t, primarySrv.URL, backupSrv.URL)
	s.f.StartWorker("w1")
	// The worker registers the keys; then both of chat's are disabled.
	testutil.WaitFor(t, "the worker's keys in the pool", 30*time.Second, func() bool {
		st, _ := s.f.StatusJSON()
		return len(st.Pool.Credentials) == 4
	})
	for _, id := range []string{"oa-1", "oa-2"} {
		if r := s.f.Producer(nil, "creds", "disable", id); r.Code != 0 {
			t.Fatalf("creds disable:\n%s", r)
		}
	}

	const n = 16
	start := time.Now()
	bodies := s.runBatch("disabled", n)
	res := s.results("disabled")
	checkRanOn(t, res, bodies, "chat-azure", kftype.FallbackWaited, "az-1", "az-2")
	checkSentOnce(t, backup, bodies)
	if got := len(primary.Received()); got != 0 {
		t.Errorf("the primary API got %d requests while its keys were disabled", got)
	}
	// No item moved before it waited: the first ran after `after`.
	for id, r := range res {
		if r.FinishedAt.Before(start.Add(after)) {
			t.Errorf("item %s finished %s after the enqueue began, before the fallback's after (%s)", id, r.FinishedAt.Sub(start), after)
		}
	}
	s.waitCounted(kftype.FallbackWaited, n)

	for _, id := range []string{"oa-1", "oa-2"} {
		if r := s.f.Producer(nil, "creds", "enable", id); r.Code != 0 {
			t.Fatalf("creds enable:\n%s", r)
		}
	}
	bodies = s.runBatch("enabled", 12)
	checkRanOn(t, s.results("enabled"), bodies, "chat", "", "oa-1", "oa-2")
	checkSentOnce(t, primary, bodies)
}
