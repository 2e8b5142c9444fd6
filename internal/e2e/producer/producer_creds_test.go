package producer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// credsList runs `producer creds list --json`: the pool object of the
// status report.
func credsList(f *e2etest.Fleet) status.Pool {
	f.T.Helper()
	r := f.Producer(nil, "creds", "list", "--json")
	if r.Code != 0 {
		f.T.Fatalf("creds list --json:\n%s", r)
	}
	var p status.Pool
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		f.T.Fatalf("creds list --json: %v\n%s", err, r.Stdout)
	}
	return p
}

// credsUsed runs a batch to its end and returns how many of its items ran
// on each credential, from the exported results.
func credsUsed(f *e2etest.Fleet, name string, n int) map[string]int {
	f.T.Helper()
	path := f.WriteInput(name+".jsonl", e2etest.JSONLItems(n, `{"id":%q}`))
	r := f.Producer(nil, "enqueue", "--wait", "--kind", "exec", "--batch", name, path)
	if r.Code != 0 {
		f.T.Fatalf("enqueue --wait:\n%s", r)
	}
	res := f.Producer(nil, "results", "--batch", name)
	if res.Code != 0 {
		f.T.Fatalf("results:\n%s", res)
	}
	used := map[string]int{}
	for _, line := range e2etest.ParseJSONLines(f.T, res.Stdout) {
		used[fmt.Sprint(line["credential_id"])]++
	}
	return used
}

// creds disable / enable / set reach a running worker at once: a disabled
// key is never used; once enabled it is.
func TestProducerCredsReachRunningWorker(t *testing.T) {
	f := e2etest.GuardedFleet(t, "concurrency: 2", "")
	f.StartWorker("w1")
	testutil.WaitFor(t, "the worker's credentials in the pool", time.Minute, func() bool { return credsList(f).Total == 2 })

	if r := f.Producer(nil, "creds", "disable", "key-a", "--reason", "test: off"); r.Code != 0 || !strings.Contains(r.Stdout, "key-a disabled") {
		t.Fatalf("disable:\n%s", r)
	}
	if used := credsUsed(f, "while-a-off", 12); used["key-a"] != 0 || used["key-b"] != 12 {
		t.Fatalf("with key-a disabled, items ran on %v", used)
	}

	if r := f.Producer(nil, "creds", "enable", "key-a"); r.Code != 0 || !strings.Contains(r.Stdout, "key-a enabled: state available") {
		t.Fatalf("enable:\n%s", r)
	}
	if r := f.Producer(nil, "creds", "disable", "key-b"); r.Code != 0 {
		t.Fatalf("disable key-b:\n%s", r)
	}
	if used := credsUsed(f, "while-b-off", 12); used["key-a"] != 12 {
		t.Fatalf("with key-a enabled and key-b disabled, items ran on %v", used)
	}

	// Limits.
	if r := f.Producer(nil, "creds", "set", "key-a", "--max-concurrent", "3", "--rate", "30/s"); r.Code != 0 ||
		!strings.Contains(r.Stdout, "max_concurrent 3, rate 30/s") {
		t.Fatalf("set:\n%s", r)
	}
	p := credsList(f)
	if c := p.Credentials[0]; c.ID != "key-a" || c.MaxConcurrent != 3 || c.Rate != "30/s" {
		t.Fatalf("after set: %+v", c)
	}
	for _, none := range []string{"none", ""} {
		if r := f.Producer(nil, "creds", "set", "key-a", "--rate", none); r.Code != 0 || !strings.Contains(r.Stdout, "rate none") {
			t.Fatalf("set --rate %q:\n%s", none, r)
		}
		if c := credsList(f).Credentials[0]; c.Rate != "" || c.MaxConcurrent != 3 {
			t.Fatalf("after --rate %q: %+v", none, c)
		}
	}

	// Errors: unknown ID, nothing to set, bad values: exit 2.
	for _, args := range [][]string{
		{"creds", "disable", "no-such-key"},
		{"creds", "enable", "no-such-key"},
		{"creds", "set", "no-such-key", "--max-concurrent", "2"},
		{"creds", "remove", "no-such-key"},
		{"creds", "set", "key-a"},
		{"creds", "set", "key-a", "--max-concurrent", "0"},
		{"creds", "set", "key-a", "--rate", "fast"},
		{"creds", "enable"},
	} {
		r := f.Producer(nil, args...)
		if r.Code != 2 {
			t.Fatalf("want exit 2:\n%s", r)
		}
		if strings.Contains(strings.Join(args, " "), "no-such-key") && !strings.Contains(r.Stderr, `no credential "no-such-key"`) {
			t.Fatalf("the error does not name the ID:\n%s", r)
		}
	}

	// remove takes it out of the pool.
	if r := f.Producer(nil, "creds", "remove", "key-b"); r.Code != 0 {
		t.Fatalf("remove:\n%s", r)
	}
	if p := credsList(f); p.Total != 1 || p.Credentials[0].ID != "key-a" {
		t.Fatalf("after remove: %+v", p)
	}
	r := f.Producer(nil, "creds", "list")
	if r.Code != 0 || !strings.Contains(r.Stdout, "key-a") || strings.Contains(r.Stdout, "key-b") {
		t.Fatalf("creds list:\n%s", r)
	}
	f.AssertNoSecretsInLogs()
}
