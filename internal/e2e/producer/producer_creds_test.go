package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// credsList runs `producer creds list --json`: the pool object of the
// status report.
func (f *fleet) credsList() status.Pool {
	f.t.Helper()
	r := f.producer(nil, "creds", "list", "--json")
	if r.code != 0 {
		f.t.Fatalf("creds list --json:\n%s", r)
	}
	var p status.Pool
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		f.t.Fatalf("creds list --json: %v\n%s", err, r.stdout)
	}
	return p
}

// credsUsed runs a batch to its end and returns how many of its items ran
// on each credential, from the exported results.
func (f *fleet) credsUsed(name string, n int) map[string]int {
	f.t.Helper()
	path := f.writeInput(name+".jsonl", jsonlItems(n, `{"id":%q}`))
	r := f.producer(nil, "enqueue", "--wait", "--kind", "exec", "--batch", name, path)
	if r.code != 0 {
		f.t.Fatalf("enqueue --wait:\n%s", r)
	}
	res := f.producer(nil, "results", "--batch", name)
	if res.code != 0 {
		f.t.Fatalf("results:\n%s", res)
	}
	used := map[string]int{}
	for _, line := range parseJSONLines(f.t, res.stdout) {
		used[fmt.Sprint(line["credential_id"])]++
	}
	return used
}

// creds disable / enable / set reach a running worker at once: a disabled
// key is never used; once enabled it is.
func TestProducerCredsReachRunningWorker(t *testing.T) {
	f := guardedFleet(t, "concurrency: 2", "")
	f.startWorker("w1")
	testutil.WaitFor(t, "the worker's credentials in the pool", time.Minute, func() bool { return f.credsList().Total == 2 })

	if r := f.producer(nil, "creds", "disable", "key-a", "--reason", "test: off"); r.code != 0 || !strings.Contains(r.stdout, "key-a disabled") {
		t.Fatalf("disable:\n%s", r)
	}
	if used := f.credsUsed("while-a-off", 12); used["key-a"] != 0 || used["key-b"] != 12 {
		t.Fatalf("with key-a disabled, items ran on %v", used)
	}

	if r := f.producer(nil, "creds", "enable", "key-a"); r.code != 0 || !strings.Contains(r.stdout, "key-a enabled: state available") {
		t.Fatalf("enable:\n%s", r)
	}
	if r := f.producer(nil, "creds", "disable", "key-b"); r.code != 0 {
		t.Fatalf("disable key-b:\n%s", r)
	}
	if used := f.credsUsed("while-b-off", 12); used["key-a"] != 12 {
		t.Fatalf("with key-a enabled and key-b disabled, items ran on %v", used)
	}

	// Limits.
	if r := f.producer(nil, "creds", "set", "key-a", "--max-concurrent", "3", "--rate", "30/s"); r.code != 0 ||
		!strings.Contains(r.stdout, "max_concurrent 3, rate 30/s") {
		t.Fatalf("set:\n%s", r)
	}
	p := f.credsList()
	if c := p.Credentials[0]; c.ID != "key-a" || c.MaxConcurrent != 3 || c.Rate != "30/s" {
		t.Fatalf("after set: %+v", c)
	}
	for _, none := range []string{"none", ""} {
		if r := f.producer(nil, "creds", "set", "key-a", "--rate", none); r.code != 0 || !strings.Contains(r.stdout, "rate none") {
			t.Fatalf("set --rate %q:\n%s", none, r)
		}
		if c := f.credsList().Credentials[0]; c.Rate != "" || c.MaxConcurrent != 3 {
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
		r := f.producer(nil, args...)
		if r.code != 2 {
			t.Fatalf("want exit 2:\n%s", r)
		}
		if strings.Contains(strings.Join(args, " "), "no-such-key") && !strings.Contains(r.stderr, `no credential "no-such-key"`) {
			t.Fatalf("the error does not name the ID:\n%s", r)
		}
	}

	// remove takes it out of the pool.
	if r := f.producer(nil, "creds", "remove", "key-b"); r.code != 0 {
		t.Fatalf("remove:\n%s", r)
	}
	if p := f.credsList(); p.Total != 1 || p.Credentials[0].ID != "key-a" {
		t.Fatalf("after remove: %+v", p)
	}
	r := f.producer(nil, "creds", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "key-a") || strings.Contains(r.stdout, "key-b") {
		t.Fatalf("creds list:\n%s", r)
	}
	f.assertNoSecretsInLogs()
}
