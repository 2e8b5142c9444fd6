package cli

import (
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/exitcode"
)

// Each command's help ends with the exit codes it can return, and only
// those, each with what it means for that command (exitCodes). The codes
// themselves are internal/exitcode's.

// exitDoc is one exit code of a command and what it means there.
type exitDoc struct {
	code int
	what string
}

// The exit codes most commands share.
var (
	exitOK       = exitDoc{exitcode.OK, "ok"}
	exitUsage    = exitDoc{exitcode.Usage, "usage or configuration error"}
	exitNATS     = exitDoc{exitcode.Unreachable, "NATS unreachable"}
	exitRedis    = exitDoc{exitcode.Unreachable, "Redis unreachable"}
	exitServers  = exitDoc{exitcode.Unreachable, "NATS or Redis unreachable"}
	exitDeclined = exitDoc{exitcode.Failed, "not confirmed: the question on a terminal was not answered yes; nothing changed"}
)

// exitCodes is the "Exit codes:" block of a command's help.
func exitCodes(docs ...exitDoc) string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, d := range docs {
		fmt.Fprintf(&b, "\n  %-4d %s", d.code, d.what)
	}
	return b.String()
}

// configHelp says where the configuration comes from (config.Find).
const configHelp = `The configuration file is --config FILE, else $KEYFLEET_CONFIG, else
./keyfleet.yaml, else $XDG_CONFIG_HOME/keyfleet/config.yaml (by default
~/.config/keyfleet/config.yaml), else none: built-in defaults for a local
NATS and Redis. $KEYFLEET_NATS_URL and $KEYFLEET_REDIS_URL override the
file; --nats-url and --redis-url override both.`

// confirmHelp is the help of a command that asks before it acts.
const confirmHelp = `On a terminal it asks for confirmation first (--yes skips the question);
without one (a script, a pipe) it acts at once.`
