package creds

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/register.lua
	registerLua string
	//go:embed lua/admin.lua
	adminLua string
	//go:embed lua/stats.lua
	statsLua string
)

// script prepends the shared libraries: the sliding-window log of
// pkg/ratelimit (so per-credential rates use the same exact algorithm) and
// the pool prelude.
func script(body string) *redis.Script {
	return redis.NewScript(ratelimit.SlidingWindowLua() + preludeLua + body)
}

var (
	acquireScript  = script(acquireLua)
	renewScript    = script(renewLua)
	releaseScript  = script(releaseLua)
	registerScript = script(registerLua)
	adminScript    = script(adminLua)
	statsScript    = script(statsLua)
)
