// Command worker runs keyfleet jobs; see `worker --help`.
package main

import (
	"os"

	"github.com/keyfleet/keyfleet/internal/cli"
)

func main() { os.Exit(cli.WorkerMain(os.Args[1:], os.Stdout, os.Stderr)) }
