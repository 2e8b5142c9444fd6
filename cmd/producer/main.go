// Command producer enqueues keyfleet work and administers the fleet; see
// `producer --help`.
package main

import (
	"os"

	"github.com/keyfleet/keyfleet/internal/cli"
)

func main() { os.Exit(cli.ProducerMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
