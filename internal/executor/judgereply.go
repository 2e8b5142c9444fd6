package executor

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// ReplyJudging is what judging a reply needs of the configuration.
type ReplyJudging struct {
	// Cooldown is pool.cooldown: the longest rest after bare 429s;
	// MaxRest is pool.max_rest: no rest a reply asks for is longer.
	Cooldown, MaxRest time.Duration
	// Scrub removes secrets from texts.
	Scrub func(string) string
}

// ReplyVerdict is what one API reply comes to for the key that sent it.
type ReplyVerdict struct {
	// Lease is how the lease ends: the real cost, a rest or a wider pace
	// after a 429, the rate-limit headers' signals, a refusal.
	Lease creds.Outcome
	// Label names the verdict as metrics and logs do: succeeded,
	// rate_limited, rejected, permanent, transient.
	Label string
	// Reason is a rate limit's or a refusal's text, scrubbed.
	Reason string
	// Cut names each rest the reply asked for that MaxRest cut.
	Cut []string
}

// JudgeReply is the verdict of a request sent outside an item's delivery
// (the gateway's), judged as an item's run is: runErr and out are what
// the http kind would have returned for the reply (jobs.ReplyError, the
// usage's cost, the rate-limit headers' signals), and item names the
// request in the key's refusal streak (different requests refused in a
// row disable a key; one request refused again does not count twice).
func JudgeReply(runErr error, out jobs.Output, item string, p ReplyJudging) ReplyVerdict {
	scrub := p.Scrub
	if scrub == nil {
		scrub = func(s string) string { return s }
	}
	v := judge(runEnd{err: runErr, out: out, item: item}, judging{cooldown: p.Cooldown, maxRest: p.MaxRest, scrub: scrub})
	return ReplyVerdict{Lease: v.lease, Label: v.label, Reason: v.reason, Cut: v.cut}
}
