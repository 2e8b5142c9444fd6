package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// newSchedule returns a schedule without turns: every pick goes to the
// lowest virtual time (TestTurns covers turns).
func newSchedule(t *testing.T) (*lanes.Schedule, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	s := lanes.New(rdb, redistest.UniqueName(t)).WithTurn(lanes.Turn{})
	if err := s.Complete(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

func sync(t *testing.T, s *lanes.Schedule, l lanes.Lane) lanes.Synced {
	t.Helper()
	if l.State == "" {
		l.State = lanes.Running
	}
	if l.Weight == 0 {
		l.Weight = 1
	}
	got, err := s.Sync(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// picks makes n picks of one slot each and counts them by lane.
func picks(t *testing.T, s *lanes.Schedule, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		l, share, _, err := s.Pick(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if l != "" {
			out[l] += share
		}
	}
	return out
}

// A lower priority gets a slot only when every lane above is empty.
func TestStrictPriority(t *testing.T) {
	s, _ := newSchedule(t)
	sync(t, s, lanes.Lane{ID: "bulk", Priority: 3, Gen: 1})
	if got := picks(t, s, 10); got["bulk"] != 10 {
		t.Fatalf("alone: %v", got)
	}
	sync(t, s, lanes.Lane{ID: "urgent", Priority: 1, Gen: 1})
	if got := picks(t, s, 50); got["urgent"] != 50 {
		t.Fatalf("with an urgent lane: %v, want every pick for urgent", got)
	}
	// urgent runs dry: bulk gets what it leaves.
	if err := s.Got(context.Background(), "urgent", 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := picks(t, s, 5); got["bulk"] != 5 {
		t.Fatalf("urgent dry: %v, want bulk", got)
	}
}

// Lanes of one priority share by weight, whatever their arrival order;
// a lane that joins late starts at the level's virtual time (no burst).
func TestWeightedFairShare(t *testing.T) {
	s, _ := newSchedule(t)
	sync(t, s, lanes.Lane{ID: "a", Priority: 3, Gen: 1})
	picks(t, s, 1000) // a runs alone for a while
	sync(t, s, lanes.Lane{ID: "b", Priority: 3, Gen: 1})
	if got := picks(t, s, 400); got["a"] != 200 || got["b"] != 200 {
		t.Fatalf("equal weights: %v, want 200/200 (b joined late: no burst, no debt)", got)
	}
	sync(t, s, lanes.Lane{ID: "a", Priority: 3, Weight: 3, Gen: 2})
	got := picks(t, s, 400)
	if ratio := float64(got["a"]) / float64(got["b"]); ratio < 2.9 || ratio > 3.1 {
		t.Fatalf("weights 3:1: %v (ratio %.2f)", got, ratio)
	}
}

// Tenants share a level by their weights before their lanes do: tenant
// research (weight 2) with three lanes and support (weight 1) with three
// get 2:1 of the picks whatever their lanes' number; within a tenant its
// lanes share by their own weights; a lane without a tenant counts as a
// tenant of its own weight. A lane that drains gives its share back to
// its tenant's others.
func TestTenantsShareBeforeTheirLanes(t *testing.T) {
	s, _ := newSchedule(t)
	for i := range 3 {
		sync(t, s, lanes.Lane{ID: fmt.Sprintf("r%d", i), Priority: 3, Gen: 1, Tenant: "research", TenantWeight: 2})
		sync(t, s, lanes.Lane{ID: fmt.Sprintf("s%d", i), Priority: 3, Gen: 1, Tenant: "support", TenantWeight: 1, Weight: 1 + i})
	}
	got := picks(t, s, 3000)
	r, sp := got["r0"]+got["r1"]+got["r2"], got["s0"]+got["s1"]+got["s2"]
	if ratio := float64(r) / float64(sp); ratio < 1.95 || ratio > 2.05 {
		t.Fatalf("tenants 2:1 with three lanes each: research %d, support %d (%.3f): %v", r, sp, ratio, got)
	}
	// Within support, lanes of weight 1, 2, 3.
	if got["s2"] < 2*got["s0"]*9/10 || got["s1"] < got["s0"]*18/10 {
		t.Fatalf("support's lanes by their weights 1:2:3: %v", got)
	}
	// research's r1 and r2 drain: r0 alone keeps research's share.
	for _, l := range []string{"r1", "r2"} {
		if ok, err := s.Drained(context.Background(), l, 1); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	got = picks(t, s, 3000)
	if ratio := float64(got["r0"]) / float64(got["s0"]+got["s1"]+got["s2"]); ratio < 1.95 || ratio > 2.05 {
		t.Fatalf("research down to one lane: %v (%.3f), want it to keep 2:1", got, ratio)
	}
	// A lane without a tenant: a tenant of its own weight (1) among them.
	sync(t, s, lanes.Lane{ID: "solo", Priority: 3, Gen: 1})
	got = picks(t, s, 4000)
	if frac := float64(got["solo"]) / 4000; frac < 0.23 || frac > 0.27 {
		t.Fatalf("a lane without a tenant beside tenants of weight 2 and 1: %v (%.3f), want a quarter", got, frac)
	}
}

// A lane found empty rests, doubling while it stays empty; Sync with a
// newer generation (items added) ends the rest at once.
func TestDryLanes(t *testing.T) {
	s, _ := newSchedule(t)
	ctx := context.Background()
	sync(t, s, lanes.Lane{ID: "x", Priority: 2, Gen: 1})
	l, _, _, _ := s.Pick(ctx, 4)
	if l != "x" {
		t.Fatalf("pick: %q", l)
	}
	if err := s.Got(ctx, "x", 4, 0); err != nil {
		t.Fatal(err)
	}
	l, _, wait, err := s.Pick(ctx, 4)
	if err != nil || l != "" || wait <= 0 || wait > 50*time.Millisecond {
		t.Fatalf("dry lane: %q %s %v, want nothing for up to 50ms", l, wait, err)
	}
	testutil.WaitFor(t, "the dry lane to be picked again", time.Second, func() bool {
		l, _, _, _ := s.Pick(ctx, 1)
		return l == "x"
	})
	_ = s.Got(ctx, "x", 1, 0)
	sync(t, s, lanes.Lane{ID: "x", Priority: 2, Gen: 2})
	if l, _, _, _ := s.Pick(ctx, 1); l != "x" {
		t.Fatalf("after new items: %q, want x at once", l)
	}
}

// Drained takes a lane out; the same generation does not bring it back,
// a newer one does; a Drained that lost the race to newer items changes
// nothing. Paused and cancelled lanes are out.
func TestDrainedAndStates(t *testing.T) {
	s, _ := newSchedule(t)
	ctx := context.Background()
	sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 5})
	if ok, err := s.Drained(ctx, "x", 4); err != nil || ok {
		t.Fatalf("drained at an older gen: %v %v", ok, err)
	}
	if ok, err := s.Drained(ctx, "x", 5); err != nil || !ok {
		t.Fatalf("drained: %v %v", ok, err)
	}
	if got := sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 5}); got != lanes.Drained {
		t.Fatalf("sync at the drained gen: %v", got)
	}
	if got := picks(t, s, 3); len(got) != 0 {
		t.Fatalf("drained lane picked: %v", got)
	}
	sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 6})
	if got := picks(t, s, 1); got["x"] != 1 {
		t.Fatalf("new items: %v", got)
	}
	sync(t, s, lanes.Lane{ID: "x", State: lanes.Paused, Priority: 3, Gen: 7})
	if got := picks(t, s, 3); len(got) != 0 {
		t.Fatalf("paused lane picked: %v", got)
	}
	if got := sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 6}); got != lanes.Stale {
		t.Fatalf("an older state after a newer: %v, want stale", got)
	}
	sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 8})
	if got := picks(t, s, 1); got["x"] != 1 {
		t.Fatalf("resumed: %v", got)
	}
	sync(t, s, lanes.Lane{ID: "x", State: lanes.Cancelled, Priority: 3, Gen: 9})
	if l, _, wait, _ := s.Pick(ctx, 1); l != "" || wait != -1 {
		t.Fatalf("cancelled lane: %q %s", l, wait)
	}
}

// A Redis that lost its state says so, also after a writer registered a
// lane (the others are not there); registering the lanes again and saying
// so brings the schedule back.
func TestLostSchedule(t *testing.T) {
	s, rdb := newSchedule(t)
	ctx := context.Background()
	sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 1})
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Pick(ctx, 1); !errors.Is(err, lanes.ErrLost) {
		t.Fatalf("after FLUSHALL: %v, want ErrLost", err)
	}
	sync(t, s, lanes.Lane{ID: "y", Priority: 3, Gen: 1}) // a writer's
	if _, _, _, err := s.Pick(ctx, 1); !errors.Is(err, lanes.ErrLost) {
		t.Fatalf("after one writer's lane: %v, want ErrLost still", err)
	}
	sync(t, s, lanes.Lane{ID: "x", Priority: 3, Gen: 1})
	if err := s.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := picks(t, s, 2); got["x"] != 1 || got["y"] != 1 {
		t.Fatalf("registered again: %v", got)
	}
}

func TestSyncRefusesBadLanes(t *testing.T) {
	s, _ := newSchedule(t)
	for _, l := range []lanes.Lane{{ID: "x", State: lanes.Running, Priority: 0, Weight: 1}, {ID: "x", State: lanes.Running, Priority: 3, Weight: 0}} {
		if _, err := s.Sync(context.Background(), l); err == nil {
			t.Errorf("%+v: want an error", l)
		}
	}
}

// Lanes whose every class a pick excludes are passed over (a worker
// waiting on one scope's keys takes another scope's lane, whatever the
// priorities), keep their place, and are not counted as resting; the
// exclusion holds past the lanes a pick examines per level. A lane with a
// class not excluded, or with none, is not passed over.
func TestPickExcludes(t *testing.T) {
	s, _ := newSchedule(t)
	ctx := context.Background()
	const gpt, o3, urgent = "b\x00gpt-4o", "b\x00o3", "urgent\x00gpt-4o"
	sync(t, s, lanes.Lane{ID: urgent, Priority: 1, Gen: 1, Classes: []string{"*|gpt-4o"}})
	sync(t, s, lanes.Lane{ID: gpt, Priority: 3, Gen: 1, Classes: []string{"*|gpt-4o"}})
	sync(t, s, lanes.Lane{ID: o3, Priority: 3, Gen: 1, Classes: []string{"*|o3"}})
	got := map[string]int{}
	for range 10 {
		l, share, _, err := s.Pick(ctx, 2, "*|gpt-4o")
		if err != nil {
			t.Fatal(err)
		}
		got[l] += share
	}
	if got[o3] != 20 || len(got) != 1 {
		t.Fatalf("picks excluding the gpt-4o class: %v, want all 20 slots to %q", got, o3)
	}
	// The excluded lanes kept their place: the urgent one first, then the
	// gpt-4o lane of b, which o3 got ahead of.
	for _, want := range []string{urgent, urgent} {
		if l, _, _, _ := s.Pick(ctx, 1); l != want {
			t.Fatalf("pick without exclusions: %q, want %q", l, want)
		}
	}
	sync(t, s, lanes.Lane{ID: urgent, State: lanes.Paused, Priority: 1, Gen: 2, Classes: []string{"*|gpt-4o"}})
	if l, _, _, _ := s.Pick(ctx, 1, "*|o3"); l != gpt {
		t.Fatalf("pick after o3's 20 slots: %q, want %q", l, gpt)
	}
	if l, _, wait, err := s.Pick(ctx, 1, "*|gpt-4o", "*|o3"); err != nil || l != "" || wait != -1 {
		t.Fatalf("every class excluded: %q %s %v, want nothing and no lane resting", l, wait, err)
	}
	// A lane of two classes (a batch of two kinds) is passed over only
	// when both are excluded; a lane of no class never.
	sync(t, s, lanes.Lane{ID: "two", Priority: 2, Gen: 1, Classes: []string{"chat|", "embed|"}})
	sync(t, s, lanes.Lane{ID: "none", Priority: 2, Gen: 1})
	got = map[string]int{}
	for range 4 {
		l, _, _, _ := s.Pick(ctx, 1, "chat|")
		got[l]++
	}
	if got["two"] != 2 || got["none"] != 2 {
		t.Fatalf("one of two classes excluded: %v, want two and none to share", got)
	}
	if l, _, _, _ := s.Pick(ctx, 1, "chat|", "embed|", "*|gpt-4o", "*|o3"); l != "none" {
		t.Fatalf("both classes excluded: %q, want the lane of no class", l)
	}

	many, _ := newSchedule(t)
	for i := range 100 {
		sync(t, many, lanes.Lane{ID: fmt.Sprintf("a%03d", i), Priority: 3, Gen: 1, Classes: []string{"k1|"}})
	}
	sync(t, many, lanes.Lane{ID: "z", Priority: 3, Gen: 1, Classes: []string{"k2|"}})
	if l, _, _, err := many.Pick(ctx, 1, "k1|"); err != nil || l != "z" {
		t.Fatalf("100 lanes ahead excluded: %q %v, want z", l, err)
	}
	if _, err := many.Sync(ctx, lanes.Lane{ID: "y", State: lanes.Running, Priority: 3, Weight: 1, Classes: []string{"a b"}}); err == nil {
		t.Fatal("a class with a space: want an error")
	}
}

// A lane picked keeps its level's picks for its turn (up to Slots slots
// or Time, whatever ends first) against lanes of its classes, while it
// has items; its virtual time grows all the same, so the shares over
// several turns stay exact. A higher priority takes over at once, a lane
// that comes back short ends its turn, a pick that passed over a lane
// starts no turn, and lanes of other classes are not held back.
func TestTurns(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s := lanes.New(rdb, redistest.UniqueName(t)).WithTurn(lanes.Turn{Time: time.Hour, Slots: 10})
	ctx := context.Background()
	if err := s.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	sync(t, s, lanes.Lane{ID: "a", Priority: 3, Gen: 1, Classes: []string{"k|"}})
	sync(t, s, lanes.Lane{ID: "b", Priority: 3, Gen: 1, Classes: []string{"k|"}})
	var order []string
	for range 40 {
		l, share, _, err := s.Pick(ctx, 1)
		if err != nil || share != 1 {
			t.Fatal(l, share, err)
		}
		order = append(order, l)
	}
	for i, l := range order {
		if want := order[i/10*10]; l != want {
			t.Fatalf("pick %d went to %q inside %q's turn: %v", i, l, want, order)
		}
	}
	if got := count(order); got["a"] != 20 || got["b"] != 20 {
		t.Fatalf("4 turns of 10: %v, want 20/20", got)
	}
	// Weights 3 : 1 over many turns.
	sync(t, s, lanes.Lane{ID: "a", Priority: 3, Weight: 3, Gen: 2, Classes: []string{"k|"}})
	if got := picks(t, s, 400); got["a"] < 290 || got["a"] > 310 {
		t.Fatalf("weights 3:1 with turns of 10: %v", got)
	}
	// An urgent lane takes over inside a turn.
	sync(t, s, lanes.Lane{ID: "u", Priority: 1, Gen: 1})
	if got := picks(t, s, 3); got["u"] != 3 {
		t.Fatalf("urgent during a turn: %v", got)
	}
	sync(t, s, lanes.Lane{ID: "u", State: lanes.Cancelled, Priority: 1, Gen: 2})
	// A short fetch ends the turn.
	l, _, _, _ := s.Pick(ctx, 1)
	if err := s.Got(ctx, l, 1, 0); err != nil {
		t.Fatal(err)
	}
	if next, _, _, _ := s.Pick(ctx, 1); next == l {
		t.Fatalf("%q came back short and kept its turn", l)
	}
	// The turn's lane passed over by one caller keeps its turn for others.
	s2, _ := newSchedule(t)
	s2 = s2.WithTurn(lanes.Turn{Time: time.Hour, Slots: 10})
	sync(t, s2, lanes.Lane{ID: "x", Priority: 3, Gen: 1, Classes: []string{"k|a"}})
	sync(t, s2, lanes.Lane{ID: "y", Priority: 3, Gen: 1, Classes: []string{"k|b"}})
	sync(t, s2, lanes.Lane{ID: "x2", Priority: 3, Gen: 1, Classes: []string{"k|a"}})
	if l, _, _, _ := s2.Pick(ctx, 1); l != "x" {
		t.Fatalf("first pick: %q, want x", l)
	}
	if l, _, _, _ := s2.Pick(ctx, 1, "k|a"); l != "y" {
		t.Fatalf("x's class passed over: %q, want y", l)
	}
	if l, _, _, _ := s2.Pick(ctx, 1); l != "x" {
		t.Fatalf("after a caller passed over it: %q, want x's turn to go on (x2 is of its classes)", l)
	}
	// A turn holds back only lanes of its own classes: lanes of another
	// class (another scope: other keys) take their share of the picks.
	s3, _ := newSchedule(t)
	s3 = s3.WithTurn(lanes.Turn{Time: time.Hour, Slots: 1000})
	sync(t, s3, lanes.Lane{ID: "a", Priority: 3, Gen: 1, Classes: []string{"*|gpt-4o"}})
	sync(t, s3, lanes.Lane{ID: "b", Priority: 3, Gen: 1, Classes: []string{"*|o3"}})
	if got := picks(t, s3, 100); got["a"] != 50 || got["b"] != 50 {
		t.Fatalf("two lanes of other classes, long turns: %v, want 50/50", got)
	}
}

func count(ls []string) map[string]int {
	out := map[string]int{}
	for _, l := range ls {
		out[l]++
	}
	return out
}

// Gens reports the generation each lane is registered at, 0 for a lane
// the schedule does not hold, over more lanes than one script call takes.
func TestGens(t *testing.T) {
	s, _ := newSchedule(t)
	var ids []string
	var want []uint64
	for i := range 700 {
		id := fmt.Sprintf("lane-%d", i)
		ids = append(ids, id)
		if i%3 == 0 {
			want = append(want, 0)
			continue
		}
		sync(t, s, lanes.Lane{ID: id, Priority: 3, Gen: uint64(i)})
		want = append(want, uint64(i))
	}
	got, err := s.Gens(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d generations for %d lanes", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("lane %s: generation %d, want %d", ids[i], got[i], want[i])
		}
	}
}
