package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The pool table says who disabled a key, what a probe said when it
// enabled one again, and a streak of refusals; text from the API is
// escaped.
func TestPoolTableDisabledByAndProbes(t *testing.T) {
	now := time.Now()
	before := now.Add(-90 * time.Second)
	p := status.Pool{Name: "default", At: now, Credentials: []status.Credential{
		{ID: "key-a", State: creds.StateDisabled, DisabledReason: "refused 3 different items in a row", DisabledAt: &before, DisabledBy: creds.DisabledByAPI},
		{ID: "key-b", State: creds.StateDisabled, DisabledReason: "billing", DisabledBy: creds.DisabledByOperator},
		{ID: "key-c", State: creds.StateAvailable, EnabledBy: creds.EnabledByProbe, EnabledAt: &before,
			EnabledReason: "probe GET https://api.example.com/v1/models answered 200 OK" + evil},
		{ID: "key-d", State: creds.StateAvailable, EnabledBy: creds.EnabledByOperator, EnabledAt: &before,
			Refusals: []string{"b/i1: 401 Unauthorized", "b/i2: 403 Forbidden"}},
	}}
	var b bytes.Buffer
	printPool(&b, p)
	out := b.String()
	for _, want := range []string{
		"disabled: refused 3 different items in a row (by the API, 1m30s ago)",
		"disabled: billing (by an operator)",
		`enabled by probe: probe GET https://api.example.com/v1/models answered 200 OK\x1b[31mred`,
		"refused 2 items in a row, last b/i2: 403 Forbidden",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the pool table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "enabled by operator") || strings.Contains(out, "\x1b") {
		t.Errorf("the pool table shows an operator's enable, or a raw escape:\n%s", out)
	}
}
