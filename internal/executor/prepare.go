package executor

import (
	"fmt"

	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// prepare reads what the pool needs of an item: its estimated cost and
// its scope. A provider kind's item is a request: its scope is its model,
// its cost the provider's estimate (what enqueue set, unless it was
// published by hand). It returns a dead letter's error text when the item
// has neither a valid cost nor a valid scope.
func (e *Executor) prepare(x *item) (deadText string) {
	it := x.it
	x.cost = it.Cost
	if x.cost == 0 && x.kind.Provider {
		x.cost = provider.Estimate(it.Payload, it.Endpoint)
	} else if x.cost == 0 {
		c, err := jsonl.Cost(it.Payload, e.policy.CostField, e.policy.CostDefault)
		if err != nil {
			return err.Error()
		}
		x.cost = c
	}
	scopeField := e.policy.ScopeField
	if x.kind.Provider {
		scopeField = provider.ScopeField
	}
	if it.Scope != "" || scopeField == "" {
		x.scope = it.Scope
		return ""
	}
	// Published without its scope (by hand, or by an older producer):
	// read it here, so that its scope's limits bind it all the same.
	scope, _, err := jsonl.Scope(it.Payload, scopeField)
	if err == nil && scope != "" {
		err = creds.ValidScope(scope)
	}
	if err != nil {
		return fmt.Sprintf("item %s: scope: %v", it.ID, err)
	}
	x.scope = scope
	return ""
}
