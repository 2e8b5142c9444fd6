package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// cliRun is one run of a binary: in dir ("": the test's), with env (its
// whole environment), stdin (nil: none; a *os.File is passed as it is,
// so a pseudo-terminal's tty is the process's terminal).
type cliRun struct {
	bin   string // "producer" or "worker"
	args  []string
	env   []string
	dir   string
	stdin io.Reader
}

// run runs it to its end (a hang is a failure) and returns what it did.
func (c cliRun) run(t *testing.T) ran {
	t.Helper()
	var out, errb launch.Buffer
	o := launch.Options{Env: append(c.env[:len(c.env):len(c.env)], "GORACE=atexit_sleep_ms=0"), Dir: c.dir, Stdin: c.stdin,
		Stdout: &out, Stderr: &errb}
	start := time.Now()
	p, err := launch.Start(c.bin, binary(t, c.bin), c.args, o)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(producerTimeout):
		p.Kill()
		t.Fatalf("%s %v did not exit within %s\nstdout:\n%s\nstderr:\n%s", c.bin, c.args, producerTimeout, out.String(), errb.String())
	}
	r := ran{args: append([]string{c.bin}, c.args...), stdout: out.String(), stderr: errb.String(), code: p.ExitCode(), took: time.Since(start)}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "DATA RACE") {
		t.Fatalf("%s panicked or raced:\n%s", c.bin, r)
	}
	return r
}

// cleanEnv is the environment without any KEYFLEET_ or XDG_CONFIG_HOME
// variable, with HOME set to home: a run that finds its configuration by
// itself finds only what the test put there.
func cleanEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KEYFLEET_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home)
}

// oneJSON decodes s, which must be exactly one JSON value, into v.
func oneJSON(t *testing.T, what, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, s)
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON value:\n%s", what, s)
	}
}

// parseJSONArray decodes the one JSON array a --json list prints.
func parseJSONArray(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	oneJSON(t, "a --json list", s, &out)
	return out
}

// pseudoTerminal is a terminal for a child's standard input: give it tty,
// type at its keyboard with answer.
type pseudoTerminal struct{ tty, ptmx *os.File }

func newPseudoTerminal(t *testing.T) *pseudoTerminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, ptmx); close(done) }() // its echo
	t.Cleanup(func() { _ = tty.Close(); _ = ptmx.Close(); <-done })
	return &pseudoTerminal{tty: tty, ptmx: ptmx}
}

func (p *pseudoTerminal) answer(t *testing.T, line string) {
	t.Helper()
	if _, err := p.ptmx.WriteString(line); err != nil {
		t.Fatal(err)
	}
}
