package e2etest

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

// CLIRun is one run of a binary: in dir ("": the test's), with env (its
// whole environment), stdin (nil: none; a *os.File is passed as it is,
// so a pseudo-terminal's tty is the process's terminal).
type CLIRun struct {
	Bin   string // "producer" or "worker"
	Args  []string
	Env   []string
	Dir   string
	Stdin io.Reader
}

// Run runs it to its end (a hang is a failure) and returns what it did.
func (c CLIRun) Run(t *testing.T) Ran {
	t.Helper()
	var out, errb launch.Buffer
	o := launch.Options{Env: append(c.Env[:len(c.Env):len(c.Env)], "GORACE=atexit_sleep_ms=0"), Dir: c.Dir, Stdin: c.Stdin,
		Stdout: &out, Stderr: &errb}
	start := time.Now()
	p, err := launch.Start(c.Bin, Binary(t, c.Bin), c.Args, o)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(producerTimeout):
		p.Kill()
		t.Fatalf("%s %v did not exit within %s\nstdout:\n%s\nstderr:\n%s", c.Bin, c.Args, producerTimeout, out.String(), errb.String())
	}
	r := Ran{Args: append([]string{c.Bin}, c.Args...), Stdout: out.String(), Stderr: errb.String(), Code: p.ExitCode(), Took: time.Since(start)}
	if strings.Contains(r.Stderr, "panic:") || strings.Contains(r.Stderr, "DATA RACE") {
		t.Fatalf("%s panicked or raced:\n%s", c.Bin, r)
	}
	return r
}

// CleanEnv is the environment without any KEYFLEET_ or XDG_CONFIG_HOME
// variable, with HOME set to home: a run that finds its configuration by
// itself finds only what the test put there.
func CleanEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KEYFLEET_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home)
}

// OneJSON decodes s, which must be exactly one JSON value, into v.
func OneJSON(t *testing.T, what, s string, v any) {
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

// ParseJSONArray decodes the one JSON array a --json list prints.
func ParseJSONArray(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	OneJSON(t, "a --json list", s, &out)
	return out
}

// PseudoTerminal is a terminal for a child's standard input: give it tty,
// type at its keyboard with answer.
type PseudoTerminal struct{ TTY, ptmx *os.File }

func NewPseudoTerminal(t *testing.T) *PseudoTerminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, ptmx); close(done) }() // its echo
	t.Cleanup(func() { _ = tty.Close(); _ = ptmx.Close(); <-done })
	return &PseudoTerminal{TTY: tty, ptmx: ptmx}
}

func (p *PseudoTerminal) Answer(t *testing.T, line string) {
	t.Helper()
	if _, err := p.ptmx.WriteString(line); err != nil {
		t.Fatal(err)
	}
}
