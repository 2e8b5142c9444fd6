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
			p := e.pool()
			e.register(p, tc.defs...)
			ctx := context.Background()
			var n atomic.Int64
			b.ResetTimer()
			start := time.Now()
			if tc.goroutines == 1 {
				for range b.N {
					l, err := p.Acquire(ctx, "bench")
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Release(ctx, l); err != nil {
						b.Fatal(err)
					}
				}
				n.Add(int64(b.N))
			} else {
				b.SetParallelism(max(1, tc.goroutines/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l, err := p.Acquire(ctx, "bench")
						if err != nil {
							b.Error(err)
							return
						}
						if err := p.Release(ctx, l); err != nil {
							b.Error(err)
							return
						}
						n.Add(1)
					}
				})
			}
			b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "pairs/s")
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
			holder := e.pool()
			waiter := holder
			if !same {
				waiter = e.pool()
			}
			e.register(holder, creds.Credential{ID: "only", MaxConcurrent: 1})
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
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Acquire(ctx, "bench")
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.Release(ctx, l); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "pairs/s")
}
