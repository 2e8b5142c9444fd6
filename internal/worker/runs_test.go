package worker

import (
	"context"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

func TestRunCounting(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := &runLog{rdb: rdb, prefix: "keyfleet:runs:" + redistest.UniqueName(t) + ":", ttl: time.Hour}
	forItem := func(batch, id string, delivery uint64) *executor.ItemRuns {
		return executor.NewItemRuns(c, batch, id, delivery)
	}
	ctx := context.Background()
	exists := func(id string) bool {
		n, err := rdb.Exists(ctx, c.prefix+"b/"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	noErr := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must := func(st executor.RunCount, err error) executor.RunCount {
		t.Helper()
		noErr(err)
		return st
	}
	check := func(what string, got, want executor.RunCount) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: got %+v, want %+v", what, got, want)
		}
	}

	t.Run("first run succeeds: nothing written", func(t *testing.T) {
		r := forItem("b", "ok", 1)
		check("start", must(r.Start(ctx)), executor.RunCount{Runs: 1})
		if err := r.Done(ctx); err != nil || exists("ok") {
			t.Fatalf("a first-time success must write nothing (err %v)", err)
		}
	})
	t.Run("failure, then the next delivery", func(t *testing.T) {
		r := forItem("b", "flaky", 1)
		must(r.Start(ctx))
		check("fail", must(r.Fail(ctx)), executor.RunCount{Runs: 1, Failures: 1})
		r2 := forItem("b", "flaky", 2)
		check("second start", must(r2.Start(ctx)), executor.RunCount{Runs: 2, Failures: 1})
		if err := r2.Done(ctx); err != nil || exists("flaky") {
			t.Fatal("done must delete the counters")
		}
	})
	t.Run("first run died silently", func(t *testing.T) {
		r := forItem("b", "killed", 1)
		must(r.Start(ctx)) // recorded nothing; the worker dies
		r2 := forItem("b", "killed", 2)
		check("after the death", must(r2.Start(ctx)), executor.RunCount{Runs: 2, Failures: 1, Lost: 1})
		// The second run dies too, after recording its start.
		r3 := forItem("b", "killed", 3)
		check("after the second death", must(r3.Start(ctx)), executor.RunCount{Runs: 3, Failures: 2, Lost: 1})
	})
	t.Run("handed back before running", func(t *testing.T) {
		r := forItem("b", "drained", 1)
		noErr(r.HandBack(ctx))
		r2 := forItem("b", "drained", 2)
		check("next delivery", must(r2.Start(ctx)), executor.RunCount{Runs: 1})
	})
	t.Run("rate limited, then run again in place", func(t *testing.T) {
		r := forItem("b", "limited", 1)
		must(r.Start(ctx))
		noErr(r.Settle(ctx))
		check("second run", must(r.Start(ctx)), executor.RunCount{Runs: 2})
		noErr(r.Settle(ctx))
		// Shutdown while waiting for the next credential: the last run
		// reported, so nothing is lost at the next delivery.
		noErr(r.HandBack(ctx))
		r2 := forItem("b", "limited", 2)
		check("next delivery", must(r2.Start(ctx)), executor.RunCount{Runs: 3})
	})
	t.Run("a later delivery handed back before running", func(t *testing.T) {
		// A run is rate limited; the next deliveries are handed back
		// before they run (their lane's slots all wait for a key): none of
		// them is a run that died.
		r := forItem("b", "bounced", 1)
		must(r.Start(ctx))
		must(r.Limited(ctx))
		for d := uint64(2); d <= 4; d++ {
			rd := forItem("b", "bounced", d)
			noErr(rd.Peek(ctx))
			noErr(rd.HandBack(ctx))
		}
		r5 := forItem("b", "bounced", 5)
		noErr(r5.Peek(ctx))
		check("delivery 5", must(r5.Start(ctx)), executor.RunCount{Runs: 2, Limited: 1})
	})
	t.Run("failures in a row that count toward a fallback", func(t *testing.T) {
		// Two keys failed the item in a row, across deliveries: the next
		// delivery reads the streak; a failure that does not count (or a
		// rate-limited run) ends it, and only the last 4 are kept.
		r := forItem("b", "streak", 1)
		must(r.Start(ctx))
		check("first", must(r.FailOn(ctx, "k1")), executor.RunCount{Runs: 1, Failures: 1, Streak: "k1"})
		r2 := forItem("b", "streak", 2)
		noErr(r2.Peek(ctx))
		check("peek", r2.Cur, executor.RunCount{Runs: 1, Failures: 1, Streak: "k1"})
		must(r2.Start(ctx))
		check("second", must(r2.FailOn(ctx, "k2")), executor.RunCount{Runs: 2, Failures: 2, Streak: "k1\nk2"})
		for _, k := range []string{"k3", "k4", "k5"} {
			must(r2.Start(ctx))
			must(r2.FailOn(ctx, k))
		}
		check("bounded", r2.Cur, executor.RunCount{Runs: 5, Failures: 5, Streak: "k2\nk3\nk4\nk5"})
		must(r2.Start(ctx))
		check("a failure that does not count", must(r2.Fail(ctx)), executor.RunCount{Runs: 6, Failures: 6})
		must(r2.Start(ctx))
		must(r2.FailOn(ctx, "k1"))
		must(r2.Start(ctx))
		check("rate limited", must(r2.Limited(ctx)), executor.RunCount{Runs: 8, Failures: 7, Limited: 1})
	})
	t.Run("counters lost with Redis", func(t *testing.T) {
		// Delivery 4 of an item whose counters are gone: the three earlier
		// deliveries stand in for lost runs.
		r := forItem("b", "amnesia", 4)
		check("start", must(r.Start(ctx)), executor.RunCount{Runs: 4, Failures: 3, Lost: 3})
	})
}
