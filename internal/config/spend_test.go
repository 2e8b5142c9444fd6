package config_test

import (
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// Prices, the Batch API discount and tenants load, and each wrong value is
// named with its line.
func TestSpendSettings(t *testing.T) {
	path := writeFile(t, "kf.yaml", `pool:
  prices:
    gpt-4o-mini: {input: 0.15, output: 0.60}
tenants:
  research: {weight: 2, budget: 100/d}
  support: {}
`)
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pool.Prices["gpt-4o-mini"]; p.Input != 0.15 || p.Output != 0.60 || c.Pool.BatchAPIDiscount != 0.5 {
		t.Errorf("prices %+v, discount %v", c.Pool.Prices, c.Pool.BatchAPIDiscount)
	}
	if c.Tenants["support"].Weight != 1 || c.Tenants["research"].Weight != 2 {
		t.Errorf("tenants %+v", c.Tenants)
	}
	if b, ok := c.TenantBudget("research"); !ok || b.Amount != 100*spend.Unit || b.Period != spend.Day {
		t.Errorf("research's budget %+v %v", b, ok)
	}
	if _, ok := c.TenantBudget("support"); ok {
		t.Error("support has no budget")
	}

	bad := writeFile(t, "bad.yaml", `pool:
  prices:
    m: {input: -1}
  batch_api_discount: 0
tenants:
  "bad name": {weight: 0, budget: 100/year}
`)
	_, err = config.Load(bad, env(nil))
	for _, want := range []string{
		"line 3: pool.prices.m.input: must be a price per 1,000,000 tokens",
		"line 4: pool.batch_api_discount: must be above 0",
		`line 6: tenants.bad name: tenant "bad name"`,
		"line 6: tenants.bad name.weight: must be 1 to 1000",
		`line 6: tenants.bad name.budget: "100/year": unknown period`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}
