package creds_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// BenchmarkAcquireRelease measures acquire+release pairs per second.
// "roomy": 8 credentials × 8 concurrent, so 64 goroutines never wait;
// "contended": 5 credentials with 1-3 concurrent, so most goroutines queue
// and every release is a handoff.
func BenchmarkAcquireRelease(b *testing.B) {
	roomy := make([]creds.Credential, 8)
	for i := range roomy {
		roomy[i] = creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: 8}
	}
	contended := []creds.Credential{
		{ID: "a", MaxConcurrent: 1}, {ID: "b", MaxConcurrent: 1}, {ID: "c", MaxConcurrent: 2},
		{ID: "d", MaxConcurrent: 3}, {ID: "e", MaxConcurrent: 3},
	}
	for _, tc := range []struct {
		name       string
		defs       []creds.Credential
		goroutines int
	}{
		{"roomy/goroutines=1", roomy, 1},
		{"roomy/goroutines=64", roomy, 64},
		{"contended/goroutines=64", contended, 64},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b)
			p := e.registered(tc.defs...)
			b.ResetTimer()
			benchPairs(b, p, tc.goroutines)
		})
	}
}

// BenchmarkHandoff measures the time from the start of a Release to the
// return of the Acquire it wakes (a waiter already queued), as p50 and p99.
// "same_handle": the waiter shares the releaser's Pool (woken in process);
// "other_handle": the waiter uses its own Pool, as another process would
// (woken by the Redis wake message).
func BenchmarkHandoff(b *testing.B) {
	for _, same := range []bool{true, false} {
		name := "other_handle"
		if same {
			name = "same_handle"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b)
			holder, waiter := e.holderAndWaiter("only", same)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				held, err := holder.Acquire(ctx, "holder")
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan *creds.Lease)
				go func() {
					l, err := waiter.Acquire(ctx, "waiter")
					if err != nil {
						b.Error(err)
					}
					got <- l
				}()
				// Let the waiter fail its attempt and queue: a benchmark may
				// sleep; what it measures starts after.
				time.Sleep(2 * time.Millisecond)
				t0 := time.Now()
				if err := holder.Release(ctx, held); err != nil {
					b.Fatal(err)
				}
				l := <-got
				lat = append(lat, time.Since(t0))
				if err := waiter.Release(ctx, l); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkAcquireReleaseAutoPipelined is the roomy 64-goroutine case with
// the scripts sent through go-redis' AutoPipeliner (WithScripter).
func BenchmarkAcquireReleaseAutoPipelined(b *testing.B) {
	e := newEnv(b)
	ap, err := e.rdb.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	defer ap.Close()
	p := e.pool(creds.WithScripter(ap))
	defs := make([]creds.Credential, 8)
	for i := range defs {
		defs[i] = creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: 8}
	}
	e.register(p, defs...)
	b.ResetTimer()
	benchPairs(b, p, 64)
}

// benchPairs has goroutines goroutines (a plain loop for 1) acquire and
// release leases on p, b.N pairs in all, and reports pairs/s.
func benchPairs(b *testing.B, p *creds.Pool, goroutines int) {
	ctx := context.Background()
	var n atomic.Int64
	start := time.Now()
	if goroutines == 1 {
		for range b.N {
			if err := acquireRelease(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		n.Add(int64(b.N))
	} else {
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := acquireRelease(ctx, p); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "pairs/s")
}

func acquireRelease(ctx context.Context, p *creds.Pool) error {
	l, err := p.Acquire(ctx, "bench")
	if err != nil {
		return err
	}
	return p.Release(ctx, l)
}
