// Command worker runs keyfleet jobs; see `worker --help`.
package main

import (
	"os"

	"github.com/keyfleet/keyfleet/internal/cli"
	"github.com/keyfleet/keyfleet/internal/jobguard"
)

func main() {
	// The worker's job guard is this binary re-executed (see jobguard):
	// then this runs the guard and exits.
	jobguard.RunIfGuard()
	os.Exit(cli.WorkerMain(os.Args[1:], os.Stdout, os.Stderr))
}
