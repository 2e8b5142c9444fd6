package fakeapi

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A bucket takes a burst of its whole capacity, then one unit per
// period/n, to the nanosecond; its reset is the time until it is full.
func TestBucketBurstAndRefill(t *testing.T) {
	b := newBucket(ratelimit.Limit{N: 3, Period: time.Second}, t0)
	if b.remaining() != 3 || b.untilFull() != 0 {
		t.Fatalf("new: remaining %d, until full %s", b.remaining(), b.untilFull())
	}
	for i := range 3 {
		if !b.fits(1) {
			t.Fatalf("burst: request %d does not fit", i)
		}
		b.take(1)
	}
	if b.fits(1) || b.remaining() != 0 || b.used() != 3 {
		t.Fatalf("after the burst: fits %v, remaining %d, used %d", b.fits(1), b.remaining(), b.used())
	}
	// One unit comes back in 1s/3 = 333,333,333.33 ns: not at 333,333,333.
	if w, ok := b.wait(1); !ok || w != 333333334 {
		t.Fatalf("wait %d %v, want 333333334", w, ok)
	}
	if b.untilFull() != time.Second {
		t.Fatalf("until full %s, want 1s", b.untilFull())
	}
	b.refill(t0.Add(333333333))
	if b.fits(1) || b.remaining() != 0 {
		t.Fatal("a unit back a fraction of a nanosecond early")
	}
	b.refill(t0.Add(333333334))
	if !b.fits(1) || b.remaining() != 1 || b.untilFull() != 666666666 {
		t.Fatalf("at 333333334 ns: fits %v, remaining %d, until full %d", b.fits(1), b.remaining(), b.untilFull())
	}
	// A time before the last changes nothing; a long idle fills it, no more.
	b.refill(t0)
	if b.remaining() != 1 {
		t.Fatalf("a refill back in time: remaining %d", b.remaining())
	}
	b.refill(t0.Add(time.Hour))
	if b.remaining() != 3 || b.untilFull() != 0 {
		t.Fatalf("after an hour: remaining %d, until full %s", b.remaining(), b.untilFull())
	}
	// More than it holds never fits; the wait is until it is full.
	b.take(2)
	if w, ok := b.wait(4); ok || w != b.untilFull() {
		t.Fatalf("wait for 4 of 3: %s %v", w, ok)
	}
}

// Limits past int64 when multiplied out (a billion tokens a day) stay
// exact.
func TestBucketLargeLimits(t *testing.T) {
	b := newBucket(ratelimit.Limit{N: 1_000_000_000, Period: 24 * time.Hour}, t0)
	b.take(1_000_000_000)
	b.refill(t0.Add(12 * time.Hour))
	if b.remaining() != 500_000_000 || b.untilFull() != 12*time.Hour {
		t.Fatalf("half a day: remaining %d, until full %s", b.remaining(), b.untilFull())
	}
	if w, _ := b.wait(500_000_001); w != 86400 { // 86,400e9 ns / 1e9 tokens a token
		t.Fatalf("wait for one token more than half: %d ns", w)
	}
}

// A client that keeps a limit as an exact sliding window (at most N
// admissions in any window of length P, as keyfleet keeps a told limit)
// never overruns a bucket of N refilled at N/P: in any span of length L it
// sends at most N·ceil(L/P) ≤ N + N·L/P, which the bucket holds.
func TestBucketTakesWhatASlidingWindowSends(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(20)
		p := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		b := newBucket(ratelimit.Limit{N: n, Period: p}, t0)
		var sent []time.Time // the client's admissions, oldest first
		now := t0
		for range 2000 {
			// Bursts, exact boundaries and random gaps.
			switch rng.IntN(4) {
			case 0:
			case 1:
				if len(sent) >= n {
					// Exactly when the window frees one.
					now = later(now, sent[len(sent)-n].Add(p))
				}
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(p) / int64(n) * 2)))
			}
			// The client's window: admissions in (now-P, now].
			in := 0
			for _, s := range sent {
				if now.Sub(s) < p {
					in++
				}
			}
			if in >= n {
				continue
			}
			sent = append(sent, now)
			if len(sent) > n {
				sent = sent[1:]
			}
			b.refill(now)
			if !b.fits(1) {
				t.Fatalf("trial %d (%d per %s): the bucket refused an admission at %s, which the window allowed", trial, n, p, now.Sub(t0))
			}
			b.take(1)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
