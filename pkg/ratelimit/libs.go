package ratelimit

import _ "embed"

var (
	//go:embed gcra_lib.lua
	gcraLib string
	//go:embed cost_window_lib.lua
	costWindowLib string
)

// GCRALua returns the Lua source of the GCRA library: local functions
// gcra_when, gcra_take and gcra_used (see the file for their contracts),
// for scripts that enforce smooth rates inside their own atomic decision.
func GCRALua() string { return gcraLib }

// CostWindowLua returns the Lua source of the exact sliding cost window:
// local functions cw_sum, cw_when, cw_record and cw_reconcile (see the
// file), for scripts that limit cost units per window.
func CostWindowLua() string { return costWindowLib }
