// Package cli holds the producer and worker command lines (cobra): flags,
// configuration loading, exit codes. The mains in cmd/ only call Main.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/logging"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// globalFlags are taken by every command and subcommand.
type globalFlags struct {
	configFile string
	natsURL    string
	redisURL   string
	logLevel   string
}

func (g *globalFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&g.configFile, "config", "", "config file (default: $KEYFLEET_CONFIG, else built-in defaults for a local NATS and Redis)")
	f.StringVar(&g.natsURL, "nats-url", "", "NATS URL (overrides the config file and $KEYFLEET_NATS_URL)")
	f.StringVar(&g.redisURL, "redis-url", "", "Redis URL (overrides the config file and $KEYFLEET_REDIS_URL)")
	f.StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn, error (overrides log.level)")
}

// load reads the configuration and applies the global flags; edit applies
// command flags before the final validation.
func (g *globalFlags) load(edit func(*config.Config)) (*config.Config, error) {
	cfg, err := config.Load(g.configFile, os.Getenv)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	if g.natsURL != "" {
		cfg.NATS.URL = g.natsURL
	}
	if g.redisURL != "" {
		cfg.Redis.URL = g.redisURL
	}
	if g.logLevel != "" {
		cfg.Log.Level = g.logLevel
	}
	if edit != nil {
		edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return cfg, nil
}

func newLogger(cfg *config.Config, out io.Writer) (*zap.Logger, error) {
	log, err := logging.New(logging.Options{Level: cfg.Log.Level, Format: cfg.Log.Format, Out: out})
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return log, nil
}

// run executes a root command and turns its error into an exit code,
// printing the error once.
func run(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	root.SilenceErrors = true
	root.SilenceUsage = true
	err := root.Execute()
	if err == nil {
		return exitcode.OK
	}
	var ee *exitcode.Error
	if !errors.As(err, &ee) {
		// cobra's own errors: unknown flags, wrong argument counts.
		fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", root.Name(), termsafe.Lines(err.Error()), root.Name())
		return exitcode.Usage
	}
	if ee.Code != exitcode.Failed || ee.Err.Error() != "" {
		// Errors quote IDs, job errors and server replies: escaped.
		fmt.Fprintf(stderr, "%s: %s\n", root.Name(), termsafe.Lines(err.Error()))
	}
	return ee.Code
}
