package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// tenantConfig writes a configuration with two tenants, research with a
// budget of 10/d and support without one, on the servers given.
func tenantConfig(t *testing.T, natsURL, redisURL string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kf.yaml")
	yaml := fmt.Sprintf(`nats: {url: %q}
redis: {url: %q}
pool: {name: tenants-cli}
queue: {stream: TENANTCMD}
tenants:
  research: {weight: 2, budget: 10/d}
  support: {weight: 1}
log: {level: warn}
`, natsURL, redisURL)
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Bad input to tenant set: one line naming the problem, exit 2, before
// any server is asked (the configuration's servers are not there).
func TestTenantSetRefusesBadInput(t *testing.T) {
	cfg := tenantConfig(t, "nats://127.0.0.1:1", "redis://127.0.0.1:1/0")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"tenant", "set", "marketing", "--budget", "5/d"}, `tenant "marketing" is not in the configuration (tenants: research, support)`},
		{[]string{"tenant", "set", "support", "--budget", "5/d"}, `tenant "support" has no budget in the configuration`},
		{[]string{"tenant", "set", "research", "--budget", "5"}, "want AMOUNT/PERIOD"},
		{[]string{"tenant", "set", "research", "--budget", "5/y"}, `unknown period "y"`},
		{[]string{"tenant", "set", "research", "--budget", "lots/d"}, `"lots"`},
		{[]string{"tenant", "set", "research", "--budget", "0/d"}, "more than 0"},
		{[]string{"tenant", "set", "research"}, "give --budget AMOUNT/PERIOD"},
		{[]string{"tenant", "set", "bad name", "--budget", "5/d"}, `tenant "bad name"`},
		{[]string{"tenant", "set"}, "accepts 1 arg"},
	} {
		code, out, errb := produce(t, cfg, c.args...)
		lines := strings.Split(strings.TrimSpace(errb), "\n")
		if code != 2 || out != "" || !strings.Contains(lines[0], c.says) || (len(lines) > 1 && !strings.HasPrefix(lines[1], "Run ")) {
			t.Errorf("producer %s: want exit 2 and one line saying %q; got %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), c.says, code, out, errb)
		}
	}
}

// tenant list and tenant set against real servers: the configured
// budgets, a live one (and where each comes from), none dropping it, and
// status --json's tenants showing the same.
func TestTenantCommands(t *testing.T) {
	ns, rs := natstest.Start(t), redistest.Start(t)
	cfg := tenantConfig(t, ns.URL(), rs.URL())
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errb := produce(t, cfg, args...)
		if code != 0 {
			t.Fatalf("producer %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errb)
		}
		return out
	}
	type tenant struct {
		Name         string   `json:"name"`
		Weight       int      `json:"weight"`
		Budget       *float64 `json:"budget"`
		Period       string   `json:"period"`
		Source       string   `json:"budget_source"`
		ConfigBudget *float64 `json:"config_budget"`
		SetBy        string   `json:"set_by"`
		Resumed      []string `json:"resumed"`
	}
	list := func(args ...string) []tenant {
		t.Helper()
		var ts []tenant
		out := mustRun(args...)
		if err := json.Unmarshal([]byte(out), &ts); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return ts
	}
	ts := list("tenant", "list", "--json")
	if len(ts) != 2 || ts[0].Name != "research" || ts[0].Weight != 2 || ts[0].Budget == nil || *ts[0].Budget != 10 || ts[0].Source != "config" ||
		ts[1].Name != "support" || ts[1].Budget != nil || ts[1].Source != "none" {
		t.Fatalf("tenant list --json before any change: %+v", ts)
	}

	var set tenant
	out := mustRun("tenant", "set", "research", "--budget", "25.5/w", "--json")
	if err := json.Unmarshal([]byte(out), &set); err != nil || set.Source != "live" || set.Budget == nil || *set.Budget != 25.5 ||
		set.Period != "w" || set.ConfigBudget == nil || *set.ConfigBudget != 10 || !strings.Contains(set.SetBy, "@") || set.Resumed == nil {
		t.Fatalf("tenant set --json: %+v %v\n%s", set, err, out)
	}
	text := mustRun("tenant", "list")
	if !strings.Contains(text, "25.5/w") || !strings.Contains(text, "live (config: 10/d)") || !strings.Contains(text, "support") {
		t.Errorf("tenant list after the change:\n%s", text)
	}
	var st struct {
		Tenants []tenant `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(mustRun("status", "--json")), &st); err != nil || len(st.Tenants) != 2 || st.Tenants[0].Source != "live" ||
		*st.Tenants[0].Budget != 25.5 {
		t.Errorf("status --json tenants: %+v %v", st.Tenants, err)
	}

	text = mustRun("tenant", "set", "research", "--budget", "none")
	if !strings.Contains(text, "dropped") || !strings.Contains(text, "10/d") {
		t.Errorf("tenant set --budget none:\n%s", text)
	}
	if ts = list("tenant", "list", "--json"); ts[0].Source != "config" || *ts[0].Budget != 10 {
		t.Errorf("after none: %+v", ts[0])
	}
}
