package status

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Hidden stands for a text a job or an API wrote (an API's error body, a
// handler's error, a probe's answer) in a Public report: only whoever
// holds the dashboard's admin token, or runs the producer, reads it.
const Hidden = "[hidden: job and API text needs the admin token]"

// statusLead is a reason that starts with an HTTP status and its text
// ("401 Unauthorized: {...}", "http: 503 Service Unavailable").
var statusLead = regexp.MustCompile(`^(?:[a-z]+: )?(\d{3}) ([A-Za-z][A-Za-z '-]*?)(?::|$| \()`)

// Class is what a Public report keeps of a reason: the HTTP status it
// starts with (code and standard text, nothing the API wrote), else
// Hidden ("" stays "").
func Class(reason string) string {
	if reason == "" {
		return ""
	}
	if m := statusLead.FindStringSubmatch(reason); m != nil {
		if code, err := strconv.Atoi(m[1]); err == nil && http.StatusText(code) == m[2] {
			return m[1] + " " + m[2] + " " + Hidden
		}
	}
	return Hidden
}

// Public returns a copy of r without any text a job or an API wrote: a
// rest's, a disable's and a probe's reasons become their Class (who
// disabled a key, which signal rested it and the IDs stay), a refusal
// keeps its item, a rest of one scope its scope. An operator's own
// reason for disabling a key is kept.
func (r Report) Public() Report {
	r.Pool.Accounts = slices.Clone(r.Pool.Accounts)
	for i := range r.Pool.Accounts {
		a := &r.Pool.Accounts[i]
		a.CoolingReason = Class(a.CoolingReason)
		if len(a.ScopeRests) > 0 {
			rests := slices.Clone(a.ScopeRests)
			for j := range rests {
				rests[j].Reason = Class(rests[j].Reason)
			}
			a.ScopeRests = rests
		}
	}
	r.Accounts = r.Pool.Accounts
	r.Pool.Credentials = slices.Clone(r.Pool.Credentials)
	for i := range r.Pool.Credentials {
		c := &r.Pool.Credentials[i]
		c.CoolingReason = Class(c.CoolingReason)
		if c.DisabledBy != creds.DisabledByOperator {
			c.DisabledReason = Class(c.DisabledReason)
		}
		if c.EnabledBy != creds.EnabledByOperator {
			c.EnabledReason = Class(c.EnabledReason)
		}
		if len(c.Refusals) > 0 {
			refusals := make([]string, len(c.Refusals))
			for j, f := range c.Refusals {
				item, reason, _ := strings.Cut(f, ": ")
				refusals[j] = item + ": " + Class(reason)
			}
			c.Refusals = refusals
		}
		if len(c.ScopeRests) > 0 {
			rests := slices.Clone(c.ScopeRests)
			for j := range rests {
				rests[j].Reason = Class(rests[j].Reason)
			}
			c.ScopeRests = rests
		}
	}
	return r
}
