package creds_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// TestMain lets the test binary play a worker process that queues waiters
// and is then killed (see startWaitingProcess).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runWaitingProcess())
	}
	os.Exit(m.Run())
}

const childEnv = "KEYFLEET_CREDS_TEST_CHILD"

// runWaitingProcess: connect, queue n waiters, say "queued", wait to be
// killed. Arguments come in the environment: "<redis addr> <pool> <n>
// <waiter TTL>".
func runWaitingProcess() int {
	f := strings.Fields(os.Getenv(childEnv))
	n, _ := strconv.Atoi(f[2])
	ttl, _ := time.ParseDuration(f[3])
	rdb := redis.NewClient(&redis.Options{Addr: f[0]})
	p, err := creds.New(rdb, f[1], creds.WithWaiterTTL(ttl))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for i := range n {
		go func() {
			l, err := p.Acquire(context.Background(), fmt.Sprintf("doomed-%d", i))
			fmt.Printf("granted %v %v\n", l != nil, err)
		}()
	}
	for {
		st, err := p.Stats(context.Background())
		if err == nil && st.Waiting >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("queued")
	select {}
}

// startWaitingProcess runs a process with n waiters queued in the pool and
// returns it once they are; the caller kills it.
func startWaitingProcess(t *testing.T, e *env, n int, ttl time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %s", childEnv, e.srv.Addr(), e.name, n, ttl))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The lines come from a goroutine, so that a child that neither
	// queues nor exits fails the test after childQueueTimeout instead of
	// hanging it (killing the child ends the goroutine's read).
	lines := make(chan string)
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
			if sc.Text() == "queued" {
				return
			}
		}
		ended <- sc.Err()
	}()
	deadline := time.After(childQueueTimeout)
	for {
		select {
		case line := <-lines:
			if line == "queued" {
				return cmd
			}
			t.Logf("waiting process: %s", line)
		case err := <-ended:
			t.Fatalf("the waiting process ended before queueing: %v", err)
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("the waiting process did not queue its %d waiters within %s", n, childQueueTimeout)
		}
	}
}

// childQueueTimeout bounds the wait for the waiting process to say
// "queued".
const childQueueTimeout = 30 * time.Second

// A process killed (SIGKILL) while its waiters are queued ahead of
// everybody holds the keys no longer than a key it held itself: live
// processes keep them busy, and no key stays idle longer than about a
// waiter TTL and a lease TTL (its waiters are dropped a waiter TTL after
// its last keep-alive; a grant made to it before that is a lease, which
// lapses unrenewed after the lease TTL of the handle that granted it).
func TestKilledProcessWithQueuedWaitersHoldsKeysOneLeaseTTL(t *testing.T) {
	const ttl, leaseTTL = 300 * time.Millisecond, time.Second
	e := newEnv(t)
	live := e.pool(creds.WithWaiterTTL(ttl), creds.WithLeaseTTL(leaseTTL))
	e.register(live, creds.Credential{ID: "a", MaxConcurrent: 1}, creds.Credential{ID: "b", MaxConcurrent: 1})
	held := []*creds.Lease{mustAcquire(t, live, "h1"), mustAcquire(t, live, "h2")}

	// The doomed process queues 4 waiters first, then dies.
	child := startWaitingProcess(t, e, 4, ttl)
	// Live waiters queue behind it.
	type use struct {
		id         string
		start, end time.Time
	}
	var mu sync.Mutex
	var uses []use
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := live.Acquire(ctxT(t, 20*time.Second), fmt.Sprintf("live-%d", g))
				if err != nil {
					t.Error(err)
					return
				}
				start := time.Now()
				time.Sleep(20 * time.Millisecond)
				end := time.Now()
				if err := live.Release(context.Background(), l); err != nil {
					t.Error(err)
				}
				mu.Lock()
				uses = append(uses, use{l.CredentialID, start, end})
				mu.Unlock()
			}
		}()
	}
	e.waitQueued(live, 8)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()
	// The held leases are released now: the doomed waiters are first in
	// line for them.
	for _, l := range held {
		if err := live.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both keys to be used 20 times each after the kill", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := map[string]int{}
		for _, u := range uses {
			n[u.id]++
		}
		return n["a"] >= 20 && n["b"] >= 20
	})
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	worst := time.Duration(0)
	for _, id := range []string{"a", "b"} {
		prev := killed
		for _, u := range uses {
			if u.id != id {
				continue
			}
			if gap := u.start.Sub(prev); gap > worst {
				worst = gap
			}
			prev = u.end
		}
	}
	t.Logf("longest a key stood idle after the kill: %s (waiter TTL %s, lease TTL %s)", worst, ttl, leaseTTL)
	// A waiter TTL and a lease TTL, plus room for a loaded machine; without
	// the waiter TTL, the dead process's waiters would be granted key
	// after key.
	if bound := ttl + leaseTTL + 1500*time.Millisecond; worst > bound {
		t.Fatalf("a key stood idle %s after the waiting process died, want at most %s", worst, bound)
	}
}

// P processes (pool handles) with S slots each wait on fewer keys than
// slots: grants go round in arrival order, so every process gets its share
// of starts: within S+1 of an exact round robin.
func TestFairnessAcrossProcesses(t *testing.T) {
	const procs, slots, rounds = 6, 3, 20
	e := newEnv(t)
	pools := make([]*creds.Pool, procs)
	for i := range pools {
		pools[i] = e.pool()
	}
	e.register(pools[0], creds.Credential{ID: "a", MaxConcurrent: 1}, creds.Credential{ID: "b", MaxConcurrent: 1})
	// Everybody queues before anything is free.
	held := []*creds.Lease{mustAcquire(t, pools[0], "h1"), mustAcquire(t, pools[0], "h2")}
	var total atomic.Int64
	counts := make([]atomic.Int64, procs)
	const want = procs * slots * rounds
	var wg sync.WaitGroup
	for p := range procs {
		for s := range slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for total.Load() < want {
					l, err := pools[p].Acquire(ctxT(t, 30*time.Second), fmt.Sprintf("p%d-s%d", p, s))
					if err != nil {
						t.Error(err)
						return
					}
					if total.Add(1) <= want {
						counts[p].Add(1)
					}
					time.Sleep(time.Millisecond)
					if err := pools[p].Release(context.Background(), l); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	e.waitQueued(pools[0], procs*slots)
	for _, l := range held {
		if err := pools[0].Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	share := want / procs
	for p := range counts {
		got := int(counts[p].Load())
		t.Logf("process %d: %d starts (share %d)", p, got, share)
		if got < share-(slots+1) || got > share+(slots+1) {
			t.Errorf("process %d got %d starts, want %d ± %d", p, got, share, slots+1)
		}
	}
}

// The work of an acquire and a release does not grow with the pool: the
// Redis commands a saturated pool runs per handoff are the same with 4
// keys and with 4,000.
func TestHandoffWorkDoesNotGrowWithThePool(t *testing.T) {
	perHandoff := func(keys int) float64 {
		e := newEnv(t)
		p := e.pool()
		defs := make([]creds.Credential, keys)
		for i := range defs {
			defs[i] = creds.Credential{ID: fmt.Sprintf("k%05d", i), MaxConcurrent: 1}
		}
		e.register(p, defs...)
		// Saturate: hold every key but one; then cycle it.
		var held []*creds.Lease
		for range keys - 1 {
			held = append(held, mustAcquire(t, p, "holder"))
		}
		ctx := context.Background()
		l := mustAcquire(t, p, "cycler")
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		before := commandCalls(t, e.rdb)
		const n = 50
		for range n {
			l := mustAcquire(t, p, "cycler")
			if err := p.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		calls := float64(commandCalls(t, e.rdb)-before) / n
		for _, h := range held {
			_ = p.Release(ctx, h)
		}
		return calls
	}
	small, large := perHandoff(4), perHandoff(4000)
	t.Logf("Redis commands per acquire+release: %.1f with 4 keys, %.1f with 4,000", small, large)
	if large > small*1.2+2 {
		t.Fatalf("an acquire+release runs %.1f commands with 4,000 keys, %.1f with 4: it scans the pool", large, small)
	}
}

// commandCalls sums the calls of every command (those scripts make
// included) from INFO commandstats.
func commandCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		total += n
	}
	return total
}

// Waiters queued when Redis loses its state are queued again by their
// handle, and served once the pool is registered again.
func TestWaitersSurviveRedisStateLoss(t *testing.T) {
	e := newEnv(t)
	p := e.pool(creds.WithWaiterTTL(200 * time.Millisecond))
	defs := []creds.Credential{{ID: "k", MaxConcurrent: 1}}
	e.register(p, defs...)
	mustAcquire(t, p, "holder")
	got := make(chan error, 3)
	for i := range 3 {
		go func() {
			l, err := p.Acquire(ctxT(t, 30*time.Second), fmt.Sprintf("w%d", i))
			if err == nil {
				time.Sleep(5 * time.Millisecond)
				err = p.Release(context.Background(), l)
			}
			got <- err
		}()
	}
	e.waitQueued(p, 3)
	if err := e.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	e.register(p, defs...) // as a worker does when it finds the pool empty
	for range 3 {
		if err := testutil.Receive(t, got, 20*time.Second, "a waiter queued before the state loss was never served"); err != nil {
			t.Fatal(err)
		}
	}
}

// A grant that reaches a handle whose waiter gave up is handed on at once
// (not held until the lease TTL).
func TestGrantToAGoneWaiterIsHandedOn(t *testing.T) {
	e := newEnv(t)
	a, b := e.pool(), e.pool()
	e.register(a, creds.Credential{ID: "k", MaxConcurrent: 1})
	held := mustAcquire(t, a, "holder")
	for i := range 20 {
		// b's waiter gives up at about the moment the release frees the key.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			l, err := b.Acquire(ctx, "fickle")
			if err == nil {
				err = b.Release(context.Background(), l) // it won the race
			}
			done <- err
		}()
		e.waitQueued(a, 1)
		time.AfterFunc(time.Duration(i%5)*100*time.Microsecond, cancel)
		if err := a.Release(context.Background(), held); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil && !errors.Is(err, creds.ErrCanceled) {
			t.Fatal(err)
		}
		// Whatever happened, the key comes back to a within a moment.
		held = mustAcquire(t, a, "holder")
		cancel()
	}
	if st := stats(t, a); st.InFlight != 1 || st.Waiting != 0 {
		t.Fatalf("after 20 rounds: %d leases, %d waiting; want 1 and 0", st.InFlight, st.Waiting)
	}
}
