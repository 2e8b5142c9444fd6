package creds

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

var (
	//go:embed lua/lib.lua
	libLua string
	//go:embed lua/step.lua
	stepLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/register.lua
	registerLua string
	//go:embed lua/join.lua
	joinLua string
	//go:embed lua/admin.lua
	adminLua string
	//go:embed lua/stats.lua
	statsLua string
	//go:embed lua/alive.lua
	aliveLua string
)

// script prepends the shared libraries: pkg/ratelimit's limiters (so the
// pool's limits use the same algorithms as the standalone limiters) and
// the pool library.
func script(body string) *redis.Script {
	return redis.NewScript(ratelimit.SlidingWindowLua() + ratelimit.GCRALua() + ratelimit.CostWindowLua() + libLua + body)
}

var (
	stepScript     = script(stepLua)
	renewScript    = script(renewLua)
	registerScript = script(registerLua)
	joinScript     = script(joinLua)
	adminScript    = script(adminLua)
	statsScript    = script(statsLua)
	// aliveScript stands alone: the keep-alive of a waiting handle.
	aliveScript = redis.NewScript(aliveLua)
)
