// Package configcheck is what a worker checks of its configuration before
// it asks any server: `producer config check` runs it on a file, and a
// worker runs it at start, so that a configuration the check passes is
// one a worker starts with (servers aside), and a worker refuses one
// with the very problems the check lists.
package configcheck

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/jobs"
)

// Check returns every problem a worker finds in l before it connects, one
// line each, naming the file and the line of the key at fault (nil when
// there is none):
//
//   - the configuration's own (l.Validate: unknown keys are the loader's,
//     then values, limits, kinds, the keys a kind names, and whatever else
//     config validates, prices included);
//   - a pool without credentials (a worker needs at least one);
//   - every credential whose secret cannot be read: its secret_env unset
//     or empty, its secret_file missing, unreadable, empty or too large
//     (getenv reads the variables; os.Getenv when nil);
//   - with gateway.listen, every gateway token whose token_env is unset
//     or empty, or holds another's token;
//   - every job kind whose handler cannot be built: an exec command that
//     is not found or not executable, a dir that is not a directory, and
//     the probes of pool.probe_interval likewise. A kind whose section has
//     a problem of its own is checked by Validate alone.
//
// Check reads files and the environment; it asks no server and runs no
// job.
func Check(l *config.Loaded, getenv func(string) string) error {
	cfg := l.Config
	valid := l.Validate()
	var ps check.List
	if len(cfg.Pool.Credentials) == 0 {
		ps.Add("pool.credentials", "is empty: a worker needs at least one credential")
	}
	ps = append(ps, cfg.CheckSecrets(getenv)...)
	ps = append(ps, cfg.CheckGatewayTokens(getenv)...)
	bad := sectionsWithProblems(valid)
	ps = append(ps, handlers(cfg, bad)...)
	ps = append(ps, probes(cfg, bad)...)
	if valid == nil {
		return l.Problems(ps)
	}
	if more := l.Problems(ps); more != nil {
		return fmt.Errorf("%w\n%w", valid, more)
	}
	return valid
}

// sectionsWithProblems lists the key paths that validation found a
// problem under, from its error lines: a handler is not built from a
// section Validate refused (its constructor would say the same again).
func sectionsWithProblems(err error) []string {
	if err == nil {
		return nil
	}
	var keys []string
	for _, line := range strings.Split(err.Error(), "\n") {
		for _, f := range keyRE.FindAllString(line, -1) {
			keys = append(keys, strings.TrimSuffix(f, ":"))
		}
	}
	return keys
}

// keyRE finds a job section's key path in an error line.
var keyRE = regexp.MustCompile(`\bjobs\.[A-Za-z0-9_.\[\]-]+:`)

// refused reports whether a problem was found at or under section.
func refused(bad []string, section string) bool {
	for _, k := range bad {
		if k == section || strings.HasPrefix(k, section+".") || strings.HasPrefix(k, section+"[") {
			return true
		}
	}
	return false
}

// handlers builds the handler of every kind a worker of cfg serves, as the
// worker builds them, and reports each that cannot be built at its
// section's key.
func handlers(cfg *config.Config, bad []string) check.List {
	var ps check.List
	common := jobs.Common{MaxOutput: cfg.Jobs.MaxOutput, ScrubEnv: cfg.SecretEnvNames()}
	names := jobs.Names()
	for _, name := range append(names, cfg.Jobs.KindNames()...) {
		base, sec, ok := cfg.Jobs.KindSection(name)
		if !ok || sec == nil {
			continue // not configured, or a kind without settings (sleep)
		}
		key := "jobs." + name
		if _, named := cfg.Jobs.Kinds[name]; named {
			key = "jobs.kinds." + name + "." + base.Name
		}
		if refused(bad, key) {
			continue
		}
		h, err := base.New(sec, common)
		if err != nil {
			ps = append(ps, placed(key, base.Name, err))
			continue
		}
		if c, ok := h.(io.Closer); ok {
			_ = c.Close() // a persistent handler: nothing started yet
		}
	}
	return ps
}

// probes builds the probes a worker of cfg runs (pool.probe_interval), as
// the worker builds them.
func probes(cfg *config.Config, bad []string) check.List {
	every := cfg.Pool.ProbeInterval
	if every <= 0 {
		return nil
	}
	var ps check.List
	common := jobs.Common{MaxOutput: cfg.Jobs.MaxOutput, ScrubEnv: cfg.SecretEnvNames()}
	secs := cfg.Jobs.ProbeSections()
	for _, name := range jobs.Names() { // in a fixed order
		sec, ok := secs[name]
		if !ok {
			continue
		}
		key := "jobs." + name
		if refused(bad, key) {
			continue
		}
		if _, err := sec.NewProber(common, min(every, time.Minute)); err != nil {
			ps = append(ps, placed(key, name, err))
		}
	}
	return ps
}

// fieldRE is a key path inside a section, as a constructor's error names
// it: "command[0]", "dir", "probe_command".
var fieldRE = regexp.MustCompile(`^[a-z_]+(\[[0-9]+\])?(\.[a-z_]+(\[[0-9]+\])?)*$`)

// placed turns a constructor's error ("exec: command[0]: <why>") into a
// problem at the key it names under section (jobs.exec.command[0]), or
// at section itself.
func placed(section, kind string, err error) check.Problem {
	msg := strings.TrimPrefix(err.Error(), kind+": ")
	if field, rest, ok := strings.Cut(msg, ": "); ok && fieldRE.MatchString(field) {
		// A probe's command is built as a command of its own:
		// "probe_command: exec: command[0]: <why>".
		if inner, ok := strings.CutPrefix(rest, kind+": command["); ok && strings.HasSuffix(field, "_command") {
			if i, why, ok := strings.Cut(inner, "]: "); ok {
				field, rest = field+"["+i+"]", why
			}
		}
		return check.Problem{Key: check.Join(section, field), Msg: rest}
	}
	return check.Problem{Key: section, Msg: msg}
}
