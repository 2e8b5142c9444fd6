// The exec job kind: the contract with the command.
//
// exec runs the configured command once per item, as an argument vector
// (no shell), in a process group of its own. With persistent: true it
// starts the command once per worker slot instead and speaks JSON lines
// with it: see the contract at the top of persistent.go; what follows here
// is the contract of a command run per item.
//
// What the command gets:
//
//   - stdin: the item's JSON object, exactly as enqueued.
//   - environment: the worker's environment minus every variable that holds
//     a credential secret (the secret_env names of all the pool's
//     credentials, so a job never sees other keys) and minus inherited
//     KEYFLEET_* variables; plus the configured env; plus
//     KEYFLEET_ITEM_ID            the item's ID
//     KEYFLEET_BATCH              the batch ID
//     KEYFLEET_ATTEMPT            1 on the item's first run, +1 on every later run
//     KEYFLEET_CREDENTIAL_ID      the ID of the credential leased for this run
//     KEYFLEET_CREDENTIAL_SECRET  that credential's secret
//     KEYFLEET_KIND               the item's kind ("exec")
//   - working directory: the configured dir, else the worker's.
//
// What its exit status means:
//
//	 0     done; stdout is the item's output. A "Retry-After:" line on
//	       stderr (as below) still makes the credential rest that long: the
//	       API said the key is spent for now.
//	75     rate limited (EX_TEMPFAIL): the credential cools down and the item
//	       runs again at once; the run does not use up an attempt. To say how
//	       long the credential must rest, print a line
//	           Retry-After: <seconds>        (e.g. "Retry-After: 30", "1.5")
//	           Retry-After: <HTTP-date>      (e.g. "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT")
//	       on stderr before exiting; the name is case-insensitive and the
//	       last such line wins. Without one the pool's cooldown applies.
//	77     credential rejected (EX_NOPERM): the refusal is recorded against
//	       the credential, with the last non-empty stderr line (up to 200
//	       bytes) as the reason, and the item runs again with another
//	       credential; no attempt is used up. A credential that refuses 3
//	       different items in a row is disabled.
//	65     permanent failure (EX_DATAERR): the item is not retried; it gets
//	       a dead-letter record.
//	other  any other non-zero status, or death by a signal: a transient
//	       failure; the item is retried after a backoff and the run uses up
//	       an attempt.
//
// Whatever the status, a line "Cost: <number>" on stderr (the name is
// case-insensitive, the last such line wins) reports what the run really
// cost (tokens, credits): it replaces the item's estimate in the
// credential's cost limits.
//
// Limits and clean-up:
//
//   - stdout is kept up to the configured bound (64 KiB by default); the
//     rest is read and thrown away, so the command never blocks on a full
//     pipe, and the output is marked truncated.
//   - error texts quote the end of stderr (up to 2 KiB) and the exit status.
//   - on the configured timeout the whole process group (the command and
//     everything it started) is killed with SIGKILL and the run is a
//     transient failure "timed out after <timeout>".
//   - when the run is cancelled (worker shutdown, lost lease) the process
//     group is killed the same way and the item is redelivered.
//   - when the command exits, whatever it left running in its process group
//     is killed.
//   - a job never outlives its worker: when the worker exits or is killed
//     (SIGKILL included), the command gets SIGKILL (its parent-death
//     signal) and the worker's job guard, a helper process, kills its
//     whole process group, within a second (see internal/jobguard). A
//     process that leaves the group (setsid) is out of reach.

package jobs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/jobguard"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// ExecConfig configures the exec kind (see the contract at the top of
// exec.go). Its yaml keys are the config file's jobs.exec section.
type ExecConfig struct {
	// Command is the program and its arguments, run without a shell.
	// Required. A name without a slash is looked up in PATH; a relative
	// path is taken from Dir.
	Command []string `yaml:"command"`
	// Timeout bounds one run. Default ExecTimeoutDefault (10m).
	Timeout time.Duration `yaml:"timeout"`
	// Dir is the working directory. Default "" (the worker's).
	Dir string `yaml:"dir"`
	// Env holds variables added to the job's environment. The per-item
	// KEYFLEET_* names (ExecReservedEnv) cannot be set here. Default none.
	Env map[string]string `yaml:"env"`
	// ProbeCommand is run, like Command, to probe a key the API disabled,
	// every pool.probe_interval: with the key in KEYFLEET_CREDENTIAL_ID and
	// KEYFLEET_CREDENTIAL_SECRET, an empty stdin and an empty item
	// (KEYFLEET_ATTEMPT 0); exit 0 enables the key again. Default none (no
	// probe).
	ProbeCommand []string `yaml:"probe_command"`
	// Persistent starts Command once per worker slot, at the slot's first
	// item, and keeps it: it reads one JSON line per item on stdin and
	// answers one on stdout (see the contract at the top of
	// persistent.go). Timeout then bounds one item's answer. Default false
	// (a process per item). ProbeCommand runs per probe either way.
	Persistent bool `yaml:"persistent"`

	// The fields below are not keys of the config section: the worker sets
	// them (see Common).

	// MaxOutput bounds Output.Body in bytes. Zero: MaxOutputDefault.
	MaxOutput int `yaml:"-"`
	// Scrubber removes secrets from stdout and stderr before they are
	// bounded, so no fragment of a secret survives a cut (the worker passes
	// one for every configured secret). Nil: the run's own secret.
	Scrubber *secret.Scrubber `yaml:"-"`
	// ScrubEnv names variables of the worker's environment the job must not
	// see. The worker passes the secret_env names of all its credentials.
	ScrubEnv []string `yaml:"-"`
	// Guard registers each run's process group, so that it is killed when
	// the worker dies (see jobguard). Nil: no guard; each command still
	// gets SIGKILL as its parent-death signal.
	Guard *jobguard.Guard `yaml:"-"`
	// Notes receives what persistent handler processes have for the log:
	// their stderr lines (scrubbed with Scrubber; with a nil Scrubber
	// stderr is dropped), their starts and failures, rate-limited (see
	// persistent.go). It is called from several goroutines. Nil: none.
	Notes func(HandlerNote) `yaml:"-"`
}

// ExecTimeoutDefault is the default of ExecConfig.Timeout.
const ExecTimeoutDefault = 10 * time.Minute

// WithDefaults fills the zero settings with their defaults.
func (c ExecConfig) WithDefaults() ExecConfig {
	c.Timeout = cmp.Or(c.Timeout, ExecTimeoutDefault)
	return c
}

// Check reports every problem of the settings, keyed by their keys in the
// section (jobs.exec in the config file). Defaults are not filled in
// first: a zero Timeout is a problem. Whether the program and Dir exist is
// NewExec's to check, on the machine that runs them.
func (c *ExecConfig) Check() check.List {
	var l check.List
	if len(c.Command) == 0 {
		l.Add("command", `must name the program to run, e.g. ["./process.sh"]`)
	}
	checkArgv(&l, "command", c.Command)
	checkArgv(&l, "probe_command", c.ProbeCommand)
	l.Positive("timeout", c.Timeout)
	for _, name := range slices.Sorted(maps.Keys(c.Env)) {
		key := "env." + name
		switch {
		case !ValidEnvName(name):
			l.Add(key, "is not an environment variable name (letters, digits and '_', not starting with a digit)")
		case slices.Contains(ExecReservedEnv, name):
			l.Add(key, "is set by the worker for every run; it cannot be set here")
		}
		if strings.IndexByte(c.Env[name], 0) >= 0 {
			l.Add(key, "the value holds a NUL byte")
		}
	}
	return l
}

// checkArgv adds the problems of an argument vector at key: a blank
// program, a NUL byte.
func checkArgv(l *check.List, key string, argv []string) {
	if len(argv) > 0 && strings.TrimSpace(argv[0]) == "" {
		l.Add(key+"[0]", "must name the program to run")
	}
	for i, arg := range argv {
		if strings.IndexByte(arg, 0) >= 0 {
			l.Add(fmt.Sprintf("%s[%d]", key, i), "holds a NUL byte")
		}
	}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether name can name an environment variable:
// letters, digits and '_', not starting with a digit.
func ValidEnvName(name string) bool { return envNameRE.MatchString(name) }

// The variables exec sets for each run.
const (
	envItemID           = "KEYFLEET_ITEM_ID"
	envBatch            = "KEYFLEET_BATCH"
	envAttempt          = "KEYFLEET_ATTEMPT"
	envCredentialID     = "KEYFLEET_CREDENTIAL_ID"
	envCredentialSecret = "KEYFLEET_CREDENTIAL_SECRET"
	envKind             = "KEYFLEET_KIND"
	envPrefix           = "KEYFLEET_"
)

// ExecReservedEnv are the variables exec sets for each run; ExecConfig.Env
// cannot set them.
var ExecReservedEnv = []string{envItemID, envBatch, envAttempt, envCredentialID, envCredentialSecret, envKind}

// The exit statuses with a meaning (sysexits.h).
const (
	exitPermanent   = 65 // EX_DATAERR
	exitRateLimited = 75 // EX_TEMPFAIL
	exitRejected    = 77 // EX_NOPERM
)

// execWaitDelay bounds how long a run waits for the command's pipes to
// close once the command has exited or been killed.
const execWaitDelay = 2 * time.Second

// errExecTimeout is the cause of a run's context when Timeout ran out.
var errExecTimeout = errors.New("exec: timeout")

type execHandler struct {
	cfg   ExecConfig
	env   []string        // cfg.Env as sorted NAME=value pairs
	drop  map[string]bool // names never inherited: ScrubEnv and cfg.Env's own
	limit int
}

// NewExec returns the exec handler, after WithDefaults. Its errors name
// the field at fault.
func NewExec(cfg ExecConfig) (Handler, error) {
	cfg = cfg.WithDefaults()
	if err := checkSettings("exec", cfg.Check(), cfg.MaxOutput); err != nil {
		return nil, err
	}
	if cfg.Dir != "" {
		fi, err := os.Stat(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("exec: dir: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("exec: dir %q is not a directory", cfg.Dir)
		}
	}
	if err := checkProgram(cfg.Command[0], cfg.Dir); err != nil {
		return nil, err
	}
	h := &execHandler{
		cfg:   cfg,
		drop:  make(map[string]bool, len(cfg.ScrubEnv)+len(cfg.Env)),
		limit: cmp.Or(cfg.MaxOutput, MaxOutputDefault),
	}
	h.cfg.Command = slices.Clone(cfg.Command)
	for name, value := range cfg.Env {
		h.env = append(h.env, name+"="+value)
		h.drop[name] = true
	}
	slices.Sort(h.env)
	for _, name := range cfg.ScrubEnv {
		h.drop[name] = true
	}
	if cfg.Persistent {
		return newPersistent(h), nil
	}
	return h, nil
}

// checkProgram reports a program that cannot be run, so that a bad config
// fails at start-up rather than on every item.
func checkProgram(prog, dir string) error {
	if !strings.Contains(prog, "/") {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("exec: command[0]: %w", err)
		}
		return nil
	}
	path := prog
	if dir != "" && !strings.HasPrefix(prog, "/") {
		path = dir + "/" + prog
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("exec: command[0]: %w", err)
	case fi.IsDir():
		return fmt.Errorf("exec: command[0]: %s is a directory", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("exec: command[0]: %s is not executable", path)
	}
	return nil
}

func (h *execHandler) Kind() string { return KindExec }

// baseEnviron is the environment every process a job kind starts gets:
// the worker's minus the names in drop (every secret_env) and every
// KEYFLEET_* variable, plus the configured env; room is left for extra
// more.
func baseEnviron(drop map[string]bool, configured []string, extra int) []string {
	parent := os.Environ()
	env := make([]string, 0, len(parent)+len(configured)+extra)
	for _, kv := range parent {
		name, _, _ := strings.Cut(kv, "=")
		if drop[name] || strings.HasPrefix(name, envPrefix) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, configured...)
}

// environ builds the job's environment for one run.
func (h *execHandler) environ(item Item, cred Credential) []string {
	env := baseEnviron(h.drop, h.env, 6)
	return append(env,
		envItemID+"="+item.ID,
		envBatch+"="+item.Batch,
		envAttempt+"="+strconv.Itoa(item.Attempt),
		envCredentialID+"="+cred.ID,
		envCredentialSecret+"="+cred.Secret.Reveal(),
		envKind+"="+cmp.Or(item.Kind, KindExec),
	)
}

// Run runs the command for one item; see the contract at the top of
// exec.go. The Output holds the stdout captured whatever the outcome.
func (h *execHandler) Run(ctx context.Context, item Item, cred Credential) (Output, error) {
	if ctx.Err() != nil {
		return Output{}, canceledError("exec", ctx)
	}
	for _, f := range []struct{ name, v string }{{"item id", item.ID}, {"batch", item.Batch}, {"kind", item.Kind}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return Output{}, Permanent(fmt.Errorf("exec: %s contains a NUL byte and cannot be passed in the environment", f.name))
		}
	}
	if strings.IndexByte(cred.Secret.Reveal(), 0) >= 0 {
		return Output{}, Rejected("secret contains a NUL byte and cannot be passed in the environment")
	}

	runCtx := ctx
	if h.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, h.cfg.Timeout, errExecTimeout)
		defer cancel()
	}

	// The pipes are made here, not by os/exec, so that Wait returns as soon
	// as the command exits even if something it started still holds them.
	var p execPipes
	defer p.close()
	if err := p.open(); err != nil {
		return Output{}, fmt.Errorf("exec: %w", err)
	}

	cmd := exec.CommandContext(runCtx, h.cfg.Command[0], h.cfg.Command[1:]...)
	cmd.Dir = h.cfg.Dir
	cmd.Env = h.environ(item, cred)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = execWaitDelay
	// In a process group of its own, with a parent-death signal, under the
	// guard.
	if err := h.cfg.Guard.Start(cmd); err != nil {
		return Output{}, fmt.Errorf("exec: start %s: %w", h.cfg.Command[0], err)
	}
	started := time.Now() // no request of the job's can leave before
	p.closeChildEnds()

	stdout := &headBuffer{max: h.limit}
	stderr := newStderrCollector()
	sc := scrubberFor(h.cfg.Scrubber, cred)
	var wg sync.WaitGroup
	wg.Go(func() { copyScrubbed(stdout, p.outR, sc) })
	wg.Go(func() { copyScrubbed(stderr, p.errR, sc) })
	wg.Go(func() {
		// EPIPE when the command does not read its stdin is no failure.
		_, _ = io.Copy(p.inW, bytes.NewReader(item.Payload))
		_ = p.inW.Close()
	})

	// Once the command has exited, Wait kills what it left behind in its
	// group, so that the pipes close and no stray process keeps the secret.
	waitErr := h.cfg.Guard.Wait(cmd)
	p.drain(&wg)
	stderr.finish()
	out := stdout.output()
	out.Sent = started
	stderr.report(&out)

	switch {
	case waitErr == nil || errors.Is(waitErr, exec.ErrWaitDelay):
		// ErrWaitDelay: exited 0, but its I/O outlived it; not a failure.
		return out, nil
	case ctx.Err() != nil:
		return out, canceledError("exec", ctx)
	case errors.Is(context.Cause(runCtx), errExecTimeout):
		return out, fmt.Errorf("exec: timed out after %s%s", h.cfg.Timeout, stderrSuffix(stderr))
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return out, fmt.Errorf("exec: %w%s", waitErr, stderrSuffix(stderr))
	}
	switch ee.ExitCode() { // -1 when killed by a signal
	case 0:
		return out, nil
	case exitRateLimited:
		return out, execRateLimited(stderr)
	case exitRejected:
		return out, Rejected(cmp.Or(stderr.lastLine, "exit 77"))
	case exitPermanent:
		return out, Permanent(fmt.Errorf("exec: %w%s", ee, stderrSuffix(stderr)))
	default:
		return out, fmt.Errorf("exec: %w%s", ee, stderrSuffix(stderr))
	}
}

// report puts what stderr said about the run into out: its cost, and on
// exit 0 a Retry-After (the item is done and the key rests). An unreadable
// Cost line is noted.
func (c *stderrCollector) report(out *Output) {
	if c.hasCost {
		n, err := strconv.ParseFloat(c.cost, 64)
		if err != nil || n < 0 || n > math.MaxInt64/2 {
			out.CostNote = fmt.Sprintf("unreadable Cost line %q on stderr (want a number)", headString([]byte(c.cost), 64))
		} else {
			out.Cost = max(int64(math.Ceil(n)), 1)
		}
	}
	if c.hasRetry {
		if d, ok := ParseRetryAfter(c.retry, time.Now()); ok && d > 0 {
			out.Rest, out.RestFrom = d, "exec stderr Retry-After"
		}
	}
}

// execRateLimited builds the error for exit 75 from what stderr said.
func execRateLimited(stderr *stderrCollector) error {
	detail := "exit 75"
	if stderr.lastLine != "" {
		detail += ": " + stderr.lastLine
	}
	if !stderr.hasRetry {
		return RateLimited(0, "", detail)
	}
	d, ok := ParseRetryAfter(stderr.retry, time.Now())
	if !ok {
		return RateLimited(0, "", fmt.Sprintf("%s (unreadable Retry-After %q)", detail, headString([]byte(stderr.retry), 64)))
	}
	return RateLimited(d, "exec stderr Retry-After", detail)
}

func stderrSuffix(c *stderrCollector) string {
	if s := c.tail.String(); s != "" {
		return "; stderr: " + s
	}
	return ""
}

// killGroup kills the process group led by p (the command was started with
// Setpgid, so the group's ID is its PID).
func killGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return p.Kill()
}

// execPipes are the command's stdin, stdout and stderr pipes.
type execPipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func (p *execPipes) open() error {
	for _, pair := range []struct{ r, w **os.File }{{&p.inR, &p.inW}, {&p.outR, &p.outW}, {&p.errR, &p.errW}} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		*pair.r, *pair.w = r, w
	}
	return nil
}

// closeChildEnds closes this process's copies of the ends the child uses.
func (p *execPipes) closeChildEnds() {
	for _, f := range []**os.File{&p.inR, &p.outW, &p.errW} {
		if *f != nil {
			_ = (*f).Close()
			*f = nil
		}
	}
}

// drain waits for the copying goroutines; if a process that left the
// command's group still holds a pipe, it gives up after execWaitDelay and
// closes this side, which ends the copies.
func (p *execPipes) drain(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(execWaitDelay)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.close()
		<-done
	}
}

func (p *execPipes) close() {
	for _, f := range []*os.File{p.inR, p.inW, p.outR, p.outW, p.errR, p.errW} {
		if f != nil {
			_ = f.Close()
		}
	}
}
