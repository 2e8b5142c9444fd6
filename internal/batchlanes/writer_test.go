package batchlanes_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// testConfig serves sleep (every key), chat (the llm group: key-a and
// key-b) and embed (every key), and names two tenants.
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kf.yaml")
	yaml := `pool:
  credentials:
    - {id: key-a, secret_env: KEY_A, groups: [llm]}
    - {id: key-b, secret_env: KEY_B, groups: [llm]}
    - {id: key-c, secret_env: KEY_C}
jobs:
  kinds:
    chat:
      http: {url: "http://127.0.0.1:1/chat"}
      credentials: [llm]
    embed:
      http: {url: "http://127.0.0.1:1/embed"}
tenants:
  research: {weight: 3}
  support: {weight: 1}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A lane's classes are the names a worker of the same configuration
// waits under (executor.WaitClass): two batches of one kind and scope are
// one class (they share the waiting slots in the schedule's order, so
// weights hold between them); another scope, or a kind of other keys, is
// another class.
func TestLaneClasses(t *testing.T) {
	w, err := batchlanes.New(nil, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	llm, err := creds.NewKeySet("key-a", "key-b")
	if err != nil {
		t.Fatal(err)
	}
	chat := executor.WaitClass(llm, "gpt-4o")
	for _, c := range []struct {
		name  string
		kinds kftype.Kinds
		scope string
		want  []string
	}{
		{"a kind of every key, no scope", kftype.Kinds{"sleep"}, "", []string{executor.WaitClass(nil, "")}},
		{"a kind of a key group, a scope", kftype.Kinds{"chat"}, "gpt-4o", []string{chat}},
		{"two kinds", kftype.Kinds{"chat", "embed"}, "gpt-4o", []string{chat, executor.WaitClass(nil, "gpt-4o")}},
		{"a kind the configuration does not serve", kftype.Kinds{"resize"}, "", []string{"?resize|"}},
		{"no kind recorded", nil, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := kftype.BatchInfo{ID: "b", Kinds: c.kinds, Priority: 2, Weight: 5, State: kftype.BatchRunning, Rev: 7}
			if c.scope != "" {
				b.Scopes = []string{c.scope}
			}
			ls := w.Lanes(b)
			l := ls[len(ls)-1]
			if l.ID != kftype.Lane("b", c.scope) || !reflect.DeepEqual(l.Classes, c.want) {
				t.Fatalf("lane %q classes %q, want %q %q", l.ID, l.Classes, kftype.Lane("b", c.scope), c.want)
			}
		})
	}
	if executor.WaitClass(llm, "gpt-4o") == executor.WaitClass(nil, "gpt-4o") || executor.WaitClass(nil, "a") == executor.WaitClass(nil, "b") {
		t.Fatal("classes of other keys or scopes must differ")
	}
}

// A record's lanes carry its state, priority, weight, revision, tenant
// and the tenant's configured weight (1 for a tenant the configuration
// does not name, or without a configuration).
func TestLanes(t *testing.T) {
	b := kftype.BatchInfo{ID: "b", Kinds: kftype.Kinds{"sleep"}, Scopes: []string{"m"}, Priority: 1, Weight: 4,
		State: kftype.BatchPaused, Rev: 9, Tenant: "research"}
	w, err := batchlanes.New(nil, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	got := w.Lanes(b)
	if len(got) != 2 || got[0].ID != "b" || got[1].ID != kftype.Lane("b", "m") {
		t.Fatalf("lanes %+v: want the batch's and its scope's", got)
	}
	for _, l := range got {
		if l.State != lanes.Paused || l.Priority != 1 || l.Weight != 4 || l.Gen != 9 || l.Tenant != "research" || l.TenantWeight != 3 {
			t.Errorf("lane %+v", l)
		}
	}
	bare, _ := batchlanes.New(nil, nil)
	if l := bare.Lanes(b)[0]; l.TenantWeight != config.TenantWeightDefault || l.Classes[0] != "?sleep|" {
		t.Errorf("without a configuration: %+v", l)
	}
}

// Repair registers the lanes the schedule lacks or holds at an older
// revision than their record, and leaves the others as they are.
func TestRepair(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	sched := lanes.New(rdb, redistest.UniqueName(t)).WithTurn(lanes.Turn{})
	var failed []string
	w, err := batchlanes.New(sched, nil, batchlanes.OnError(func(batch string, err error) { failed = append(failed, batch) }))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string, rev uint64, state kftype.BatchState) kftype.BatchInfo {
		return kftype.BatchInfo{ID: id, Kinds: kftype.Kinds{"sleep"}, Priority: 3, Weight: 1, State: state, Rev: rev}
	}
	written, old := rec("written", 5, kftype.BatchRunning), rec("old", 3, kftype.BatchRunning)
	w.WriteLanes(ctx, written)
	w.WriteLanes(ctx, old)
	if len(failed) != 0 {
		t.Fatalf("WriteLanes failed for %v", failed)
	}
	old.Rev, old.State = 4, kftype.BatchPaused // written to NATS, its lanes not
	unknown := rec("unknown", 2, kftype.BatchRunning)
	n, err := w.Repair(ctx, []kftype.BatchInfo{written, old, unknown, {ID: "gone", Deleted: true}})
	if err != nil || n != 2 {
		t.Fatalf("Repair: %d batches, %v; want the 2 behind", n, err)
	}
	gens, err := sched.Gens(ctx, []string{"written", "old", "unknown", "gone"})
	if err != nil || !reflect.DeepEqual(gens, []uint64{5, 4, 2, 0}) {
		t.Fatalf("generations after the repair: %v %v", gens, err)
	}
	picked := map[string]bool{}
	for range 4 {
		l, _, _, err := sched.Pick(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		picked[l] = true
	}
	if !picked["written"] || !picked["unknown"] || picked["old"] {
		t.Fatalf("picked %v: want the running lanes, not the paused one", picked)
	}
	if n, err := w.Repair(ctx, []kftype.BatchInfo{written, old, unknown}); err != nil || n != 0 {
		t.Fatalf("a second Repair registered %d batches (%v): want none", n, err)
	}
}
