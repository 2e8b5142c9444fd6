package creds

import (
	"testing"
	"time"
)

// localTime is never later than the moment it maps: the pair's call ran
// on Redis after it was sent, so Redis's clock is read as at least that
// far ahead.
func TestLocalTimeIsNoLaterThanTheMoment(t *testing.T) {
	base := time.Now()
	const offset = 5 * time.Second // Redis's clock ahead of this process's
	onRedis := func(local time.Time) int64 { return local.Add(offset).UnixMicro() }
	for _, tc := range []struct {
		name  string
		delay time.Duration // from the pair's send to its run on Redis
		grant time.Duration // the grant, after the send
	}{
		{"grant after the pair, instant call", 0, 300 * time.Millisecond},
		{"grant after the pair, slow call", 40 * time.Millisecond, 300 * time.Millisecond},
		{"grant before the pair's call ran", 40 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clockPair{sent: base, redisUS: onRedis(base.Add(tc.delay))}
			grant := base.Add(tc.grant)
			got, ok := c.localTime(onRedis(grant))
			if !ok {
				t.Fatal("no mapping with a pair")
			}
			if got.After(grant) {
				t.Fatalf("mapped to %s after the moment", got.Sub(grant))
			}
			// Redis's clock is read in µs: the early side is the pair's
			// delay, to a µs.
			if d := grant.Sub(got); d < tc.delay-time.Microsecond || d > tc.delay+time.Microsecond {
				t.Fatalf("mapped %s early, want the pair's delay %s", d, tc.delay)
			}
		})
	}
	if _, ok := (clockPair{}).localTime(1); ok {
		t.Fatal("a mapping without a pair")
	}
}
