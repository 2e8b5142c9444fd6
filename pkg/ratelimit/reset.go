package ratelimit

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed reset.lua
var resetScriptSrc string

// resetScript deletes a limiter's key. It is a script, not a DEL, so that
// the limiters need nothing but redis.Scripter.
var resetScript = redis.NewScript(resetScriptSrc)
