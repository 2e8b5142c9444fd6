// Package cli holds the producer and worker command lines (cobra): flags,
// configuration loading, exit codes. The mains in cmd/ only call Main.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

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
	f.StringVar(&g.configFile, "config", "", "config file; without it: "+strings.TrimPrefix(config.DiscoveryHelp, "--config FILE, else "))
	f.StringVar(&g.natsURL, "nats-url", "", "NATS URL (overrides the config file and $KEYFLEET_NATS_URL)")
	f.StringVar(&g.redisURL, "redis-url", "", "Redis URL (overrides the config file and $KEYFLEET_REDIS_URL)")
	f.StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn, error (overrides log.level)")
}

// read reads the configuration (config.Read: the file config.Find finds,
// then the environment's server URLs), applies the global flags and then
// edit's (command flags, each noted with l.Note so that a problem of its
// value names the flag, not a line), and validates the result.
func (g *globalFlags) read(edit func(*config.Loaded)) (*config.Loaded, error) {
	l, err := g.readUnchecked(edit)
	if err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return l, nil
}

// readUnchecked is read without the validation.
func (g *globalFlags) readUnchecked(edit func(*config.Loaded)) (*config.Loaded, error) {
	l, err := config.Read(g.configFile, os.Getenv)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	cfg := l.Config
	for _, f := range []struct {
		flag, key, v string
		dst          *string
	}{
		{"--nats-url", "nats.url", g.natsURL, &cfg.NATS.URL},
		{"--redis-url", "redis.url", g.redisURL, &cfg.Redis.URL},
		{"--log-level", "log.level", g.logLevel, &cfg.Log.Level},
	} {
		if f.v != "" {
			*f.dst = f.v
			l.Note(f.key, f.flag)
		}
	}
	if edit != nil {
		edit(l)
	}
	return l, nil
}

// load is read's configuration.
func (g *globalFlags) load(edit func(*config.Loaded)) (*config.Config, error) {
	l, err := g.read(edit)
	if err != nil {
		return nil, err
	}
	return l.Config, nil
}

func newLogger(cfg *config.Config, out io.Writer) (*zap.Logger, error) {
	log, err := logging.New(logging.Options{Level: cfg.Log.Level, Format: cfg.Log.Format, Out: out})
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return log, nil
}

// run executes a root command and turns its error into an exit code
// (exitcode.Lookup: the one place an error gets its code), printing the
// error once.
func run(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	root.SilenceErrors = true
	root.SilenceUsage = true
	err := root.Execute()
	if err == nil {
		return exitcode.OK
	}
	code, known := exitcode.Lookup(err)
	if !known {
		// cobra's own errors: unknown flags, wrong argument counts.
		fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", root.Name(), termsafe.Lines(err.Error()), root.Name())
		return exitcode.Usage
	}
	if code != exitcode.Failed || err.Error() != "" {
		// Errors quote IDs, job errors and server replies: escaped.
		fmt.Fprintf(stderr, "%s: %s\n", root.Name(), termsafe.Lines(err.Error()))
	}
	return code
}

// reworded is an error said otherwise: its text is text, its chain err's
// (so its class and exit code are err's).
type reworded struct {
	text string
	err  error
}

func (r *reworded) Error() string { return r.text }
func (r *reworded) Unwrap() error { return r.err }

// reword returns err with the text of format and args.
func reword(err error, format string, args ...any) error {
	return &reworded{text: fmt.Sprintf(format, args...), err: err}
}
