package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// The pinned kinds and key groups example (testdata) loads, and the
// accessors the worker uses read it as docs/limits.md says.
func TestDesignKindsExample(t *testing.T) {
	c, err := config.Load("testdata/design_kinds.yaml", env(nil))
	if err != nil {
		t.Fatalf("the pinned kinds example: %v", err)
	}
	if got := c.Jobs.KindNames(); !slices.Equal(got, []string{"chat", "embed", "resize"}) {
		t.Errorf("KindNames: got %v", got)
	}
	for kind, want := range map[string][]string{
		"chat":   {"key-a", "key-b"},
		"embed":  {"key-b", "key-c"},
		"resize": nil, // no credentials: every key
		"http":   nil, // a built-in kind: every key
		"sleep":  nil,
		"nope":   nil,
	} {
		if got := c.KindKeys(kind); !reflect.DeepEqual(got, want) {
			t.Errorf("KindKeys(%q): want %#v, got %#v", kind, want, got)
		}
	}
	if c.Pool.Scope.Field != "model" {
		t.Errorf("pool.scope.field: got %q", c.Pool.Scope.Field)
	}
	if got := c.Pool.Credentials[1].Groups; !slices.Equal(got, []string{"llm", "emb"}) {
		t.Errorf("key-b's groups: got %v", got)
	}
	want := []creds.Limit{
		{Kind: creds.LimitWindow, N: 500, Period: time.Minute},
		{Kind: creds.LimitCost, N: 30000, Period: time.Minute, Scope: "gpt-4o"},
		{Kind: creds.LimitCost, N: 200000, Period: time.Minute, Scope: "gpt-4o-mini"},
	}
	if got := c.Pool.Credentials[0].PoolLimits(); !reflect.DeepEqual(got, want) {
		t.Errorf("key-a's limits:\nwant %+v\ngot  %+v", want, got)
	}
}

// KindSection says how each kind's items run: a named kind as its
// section's built-in kind, with that section.
func TestKindSection(t *testing.T) {
	c, err := config.Load("testdata/design_kinds.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kind, base string
		ok         bool
		sec        jobs.Section
	}{
		{"chat", jobs.KindHTTP, true, c.Jobs.Kinds["chat"].HTTP},
		{"resize", jobs.KindExec, true, c.Jobs.Kinds["resize"].Exec},
		{"http", jobs.KindHTTP, true, c.Jobs.HTTP},
		{"sleep", jobs.KindSleep, true, nil},
		{"exec", "", false, nil}, // not configured
		{"nope", "", false, nil},
	} {
		base, sec, ok := c.Jobs.KindSection(tt.kind)
		if ok != tt.ok || base.Name != tt.base || sec != tt.sec {
			t.Errorf("KindSection(%q): want %q %v %v, got %q %v %v", tt.kind, tt.base, tt.sec, tt.ok, base.Name, sec, ok)
		}
	}
	// A named kind's section has the defaults of its built-in kind's.
	chat := c.Jobs.Kinds["chat"].HTTP
	if chat.Method != "POST" || chat.Header != "Authorization" || chat.Timeout != time.Minute || chat.CostFrom != "usage.total_tokens" {
		t.Errorf("jobs.kinds.chat.http: defaults not filled in: %+v", chat)
	}
	if got := c.Jobs.Kinds["resize"].Exec.Timeout; got != 10*time.Minute {
		t.Errorf("jobs.kinds.resize.exec.timeout: want the default 10m, got %s", got)
	}
}

// A kind's credentials naming a key both by a group and by its ID give it
// once.
func TestKindKeysOnce(t *testing.T) {
	path := writeFile(t, "kf.yaml", "pool:\n  credentials:\n"+
		"    - {id: z, secret_env: Z, groups: [g, h]}\n"+
		"    - {id: a, secret_env: A, groups: [h]}\n"+
		"    - {id: m, secret_env: M}\n"+
		"jobs:\n  kinds:\n    k:\n      exec: {command: [x]}\n      credentials: [h, z, g]\n")
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.KindKeys("k"); !slices.Equal(got, []string{"a", "z"}) {
		t.Errorf("KindKeys: want [a z], got %v", got)
	}
}

// Every limit form decodes straight into its creds.Limit, and the rate
// shorthand comes first in PoolLimits.
func TestLimitForms(t *testing.T) {
	path := writeFile(t, "kf.yaml", "pool:\n  scope: {field: model}\n  credentials:\n    - id: a\n      secret_env: A\n      rate: 60/m\n      limits:\n"+
		"        - {rate: 500/m}\n"+
		"        - {rate: 10/s, burst: 1}\n"+
		"        - {cost: 30000/m}\n"+
		"        - {rate: 5/30s, burst: 3, scope: 'models/gemini-1.5-pro'}\n"+
		"        - {cost: 100/1h, scope: 'claude-3-5-sonnet@20240620'}\n"+
		"        - &l {cost: 7/s}\n"+
		"        - {<<: *l, scope: x}\n")
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	cr := c.Pool.Credentials[0]
	if cr.Rate != (ratelimit.Limit{N: 60, Period: time.Minute}) {
		t.Errorf("rate: got %+v", cr.Rate)
	}
	want := []creds.Limit{
		{Kind: creds.LimitWindow, N: 60, Period: time.Minute},
		{Kind: creds.LimitWindow, N: 500, Period: time.Minute},
		{Kind: creds.LimitSmooth, N: 10, Period: time.Second, Burst: 1},
		{Kind: creds.LimitCost, N: 30000, Period: time.Minute},
		{Kind: creds.LimitSmooth, N: 5, Period: 30 * time.Second, Burst: 3, Scope: "models/gemini-1.5-pro"},
		{Kind: creds.LimitCost, N: 100, Period: time.Hour, Scope: "claude-3-5-sonnet@20240620"},
		{Kind: creds.LimitCost, N: 7, Period: time.Second},
		{Kind: creds.LimitCost, N: 7, Period: time.Second, Scope: "x"},
	}
	if got := cr.PoolLimits(); !reflect.DeepEqual(got, want) {
		t.Errorf("PoolLimits:\nwant %+v\ngot  %+v", want, got)
	}
	// What the file wrote is what producer creds set --limit writes.
	for _, l := range want {
		if p, err := creds.ParseLimit(l.String()); err != nil || p != l {
			t.Errorf("%v: ParseLimit(String()) = %+v, %v", l, p, err)
		}
	}
	if got := (config.Credential{}).PoolLimits(); got != nil {
		t.Errorf("no limits: want nil, got %v", got)
	}
}

// Validate changes nothing in the config it checks, valid or not.
func TestValidateWritesNothing(t *testing.T) {
	for _, file := range []string{"testdata/design_kinds.yaml", referencePath} {
		c, err := config.Load(file, env(nil))
		if err != nil {
			t.Fatal(err)
		}
		before, _ := config.Load(file, env(nil))
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		// Now invalid: a scoped limit without pool.scope.field, a limit of 0.
		last := len(c.Pool.Credentials) - 1
		if len(c.Pool.Credentials[last].Limits) == 0 {
			last = 0
		}
		c.Pool.Scope.Field, c.Pool.Credentials[last].Limits[0].N = "", 0
		before.Pool.Scope.Field, before.Pool.Credentials[last].Limits[0].N = "", 0
		if c.Validate() == nil {
			t.Fatalf("%s: an invalid config validated", file)
		}
		if !reflect.DeepEqual(c, before) {
			t.Errorf("%s: Validate changed the config:\nbefore %+v\nafter  %+v", file, before, c)
		}
	}
}

// A config built in code (not decoded) has its limits, groups and kinds
// checked by Validate, without lines.
func TestValidateCodedConfig(t *testing.T) {
	c := config.Default()
	c.Pool.Credentials = []config.Credential{{
		ID: "a", SecretEnv: "A", MaxConcurrent: 1, Groups: []string{"g h"},
		Rate: ratelimit.Limit{N: 1, Period: 500 * time.Microsecond},
		Limits: []creds.Limit{
			{Kind: creds.LimitCost, N: 0, Period: time.Second},
			{Kind: creds.LimitWindow, N: 5, Period: time.Second, Scope: "gpt-4o"},
		},
	}}
	c.Jobs.Kinds = map[string]config.Kind{"chat": {Exec: &config.ExecJob{Command: []string{"x"}, Timeout: time.Second}, Credentials: []string{"g"}}}
	want := []string{
		`config: built-in defaults: pool.credentials[0].rate: period must be at least 1ms, got 500µs`,
		`config: built-in defaults: pool.credentials[0].limits[0]: count must be at least 1, got 0`,
		`config: built-in defaults: pool.credentials[0].limits[1].scope: a scoped limit needs pool.scope.field (the items' field holding their scope, e.g. model) or a kind with a provider (its items' scope is their model)`,
		`config: built-in defaults: pool.credentials[0].groups[0]: "g h": want at most 128 letters, digits, '_', '.', ':', '@' or '-'`,
		`config: built-in defaults: jobs.kinds.chat.credentials[0]: "g" names no key: no credential has it as its id or among its groups`,
	}
	if got := errLines(c.Validate()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}
