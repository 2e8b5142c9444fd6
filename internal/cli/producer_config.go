package cli

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/configcheck"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

func (p *producer) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file without any server",
		Long: `config checks the configuration.

  check [--json]    everything a worker checks before it asks a server

` + exitCodes(exitOK, exitDoc{exitcode.Usage, "usage error, or a configuration with problems"}),
		Example: `  producer config check --config kf.yaml`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(p.configCheckCmd())
	return cmd
}

// configCheckOutput is `config check --json`'s object.
type configCheckOutput struct {
	// Config is the file checked, or "built-in defaults".
	Config   string        `json:"config"`
	OK       bool          `json:"ok"`
	Problems []configIssue `json:"problems"`
}

// configIssue is one problem: its line (null when not the file's) and
// its text, as the check prints it.
type configIssue struct {
	Line    *int   `json:"line"`
	Message string `json:"message"`
}

func (p *producer) configCheckCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the configuration as a worker does at start, without any server",
		Long: `check reads the configuration and checks everything a worker checks
before it asks a server, with the very same function the worker runs at
start:

  - the file: unknown keys (with a "did you mean"), values of the wrong
    type, keys set twice;
  - the values: durations, sizes, limits (rate, burst, cost, scope),
    kinds (exactly one of http or exec; the keys a kind names exist),
    queue names, server URLs, and what config validation adds (prices);
  - credentials: at least one, each secret present: its secret_env set
    and not empty, its secret_file readable, not empty, not over 64 KiB
    (secrets are read, never printed);
  - job handlers: every configured kind's can be built: an exec command
    that is found and executable, its dir; the probes of
    pool.probe_interval likewise.

It prints every problem, each with the file and the line of the key at
fault, on standard error, and exits 2; or says the configuration is good
and exits 0. It asks no server (--nats-url and --redis-url are checked as
values) and runs no job.

--json prints one JSON object on standard output instead:
{"config": FILE, "ok": true|false, "problems": [{"line": N or null,
"message": TEXT}]} (exit 0 or 2 all the same).

` + configHelp + `

` + exitCodes(exitDoc{exitcode.OK, "the configuration is good: a worker starts with it (servers aside)"},
			exitDoc{exitcode.Usage, "usage error, or problems in the configuration (each listed)"}),
		Example: `  producer config check --config kf.yaml
  KEY_A=sk-... producer config check          # ./keyfleet.yaml, or ~/.config/keyfleet/config.yaml
  producer config check --json | jq -r '.problems[].message'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			source, err := p.checkConfig()
			return p.reportCheck(source, err, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: {config, ok, problems}")
	return cmd
}

// checkConfig runs configcheck.Check on the configuration the flags name
// and returns its source and problems.
func (p *producer) checkConfig() (string, error) {
	source, _ := config.Find(p.g.configFile, os.Getenv)
	if source == "" {
		source = config.DefaultsSource
	}
	l, err := p.g.readUnchecked(nil)
	if err != nil {
		return source, err
	}
	return l.Config.Source, configcheck.Check(l, os.Getenv)
}

// reportCheck prints what checkConfig found.
func (p *producer) reportCheck(source string, problems error, asJSON bool) error {
	var lines []string
	if problems != nil {
		lines = strings.Split(strings.TrimRight(problems.Error(), "\n"), "\n")
	}
	n := len(lines)
	summary := fmt.Errorf("%s: %d %s: a worker would not start with it", termsafe.String(source), n, plural(n, "problem", "problems"))
	if asJSON {
		out := configCheckOutput{Config: source, OK: n == 0, Problems: []configIssue{}}
		for _, l := range lines {
			out.Problems = append(out.Problems, configIssue{Line: problemLine(source, l), Message: l})
		}
		if err := writeJSON(p.stdout, out); err != nil || n == 0 {
			return err
		}
		return exitcode.With(exitcode.Usage, summary)
	}
	if n == 0 {
		fmt.Fprintf(p.stdout, "%s: ok: a worker starts with this configuration (servers aside).\n", termsafe.String(source))
		return nil
	}
	for _, l := range lines {
		fmt.Fprintln(p.stderr, termsafe.String(l))
	}
	return exitcode.With(exitcode.Usage, summary)
}

// lineRE is the line a problem names after its file.
var lineRE = regexp.MustCompile(`^line ([0-9]+): `)

// problemLine is the line of the file a problem's text names, or nil.
func problemLine(source, text string) *int {
	rest, ok := strings.CutPrefix(text, "config: "+source+": ")
	if !ok {
		return nil
	}
	m := lineRE.FindStringSubmatch(rest)
	if m == nil {
		return nil
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return nil
	}
	return &n
}
