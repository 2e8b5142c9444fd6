package fakeapi

import (
	"math/big"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// bucket is a limit of the strict mode: a token bucket as both providers
// describe theirs. It holds up to n units (requests or tokens) and is
// refilled continuously at n per period: Anthropic "uses the token bucket
// algorithm to do rate limiting. This means that your capacity is
// continuously replenished up to your maximum limit, rather than being
// reset at fixed intervals" (docs.anthropic.com/en/api/rate-limits); on
// OpenAI a key at 4,999 of 5,000 requests a minute reads
// "x-ratelimit-reset-requests: 12ms" (a reply quoted in
// community.openai.com/t/how-to-get-rate-limit-reset-time-for-response-api/1268905):
// one request's refill, 60 s / 5,000.
//
// The level is exact: it is kept as units × period in nanoseconds, so
// that a refill of any number of nanoseconds loses nothing, in big
// integers since n × period passes int64 for large limits (a day's
// tokens). The caller serialises the use of a bucket.
type bucket struct {
	n      int64
	period int64     // nanoseconds
	at     time.Time // when the level was last brought up to date
	level  big.Int   // units × period
	full   big.Int   // n × period
}

// newBucket is a full bucket of limit l.
func newBucket(l ratelimit.Limit, now time.Time) *bucket {
	b := &bucket{n: int64(l.N), period: int64(l.Period), at: now}
	b.full.Mul(big.NewInt(b.n), big.NewInt(b.period))
	b.level.Set(&b.full)
	return b
}

// refill brings the level up to now. A now before the last one changes
// nothing (requests take their time before they take the lock).
func (b *bucket) refill(now time.Time) {
	e := now.Sub(b.at)
	if e <= 0 {
		return
	}
	b.at = now
	var add big.Int
	add.Mul(big.NewInt(int64(e)), big.NewInt(b.n))
	b.level.Add(&b.level, &add)
	if b.level.Cmp(&b.full) > 0 {
		b.level.Set(&b.full)
	}
}

// units is cost in the level's scale.
func (b *bucket) units(cost int64) *big.Int {
	return new(big.Int).Mul(big.NewInt(cost), big.NewInt(b.period))
}

// fits reports whether cost units are in the bucket.
func (b *bucket) fits(cost int64) bool { return b.level.Cmp(b.units(cost)) >= 0 }

// wait is how long until cost units are in the bucket (0 when they are),
// rounded up to the nanosecond; never false when cost is more than the
// bucket holds: then it is the time until the bucket is full.
func (b *bucket) wait(cost int64) (time.Duration, bool) {
	if cost > b.n {
		return b.untilFull(), false
	}
	var short big.Int
	short.Sub(b.units(cost), &b.level)
	return b.nanos(&short), true
}

// take removes cost units (the caller checked that they fit).
func (b *bucket) take(cost int64) { b.level.Sub(&b.level, b.units(cost)) }

// remaining is the whole units in the bucket (its level rounded down).
func (b *bucket) remaining() int64 {
	var q big.Int
	q.Quo(&b.level, big.NewInt(b.period))
	return q.Int64()
}

// used is what the bucket lacks of being full, in whole units rounded up.
func (b *bucket) used() int64 { return b.n - b.remaining() }

// untilFull is how long until the bucket is full again, rounded up to the
// nanosecond; 0 when it is full.
func (b *bucket) untilFull() time.Duration {
	var short big.Int
	short.Sub(&b.full, &b.level)
	return b.nanos(&short)
}

// nanos is the time the refill takes to add short (in the level's scale):
// short / n nanoseconds, rounded up; 0 for short ≤ 0.
func (b *bucket) nanos(short *big.Int) time.Duration {
	if short.Sign() <= 0 {
		return 0
	}
	var q, r big.Int
	q.QuoRem(short, big.NewInt(b.n), &r)
	if r.Sign() > 0 {
		q.Add(&q, big.NewInt(1))
	}
	return time.Duration(q.Int64())
}
