package e2etest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Ran is one finished run of the producer binary.
type Ran struct {
	Args           []string
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

func (r Ran) String() string {
	return fmt.Sprintf("producer %s: exit %d after %s\n--- stdout\n%s--- stderr\n%s",
		strings.Join(r.Args, " "), r.Code, r.Took.Round(time.Millisecond), Tail(r.Stdout, 30), Tail(r.Stderr, 30))
}

// producerTimeout bounds one run: a hang is a failure, not a wait.
const producerTimeout = 2 * time.Minute

// RunProducer runs the producer binary with env and stdin (nil: none) and
// waits for it.
func RunProducer(t *testing.T, env []string, stdin []byte, args ...string) Ran {
	t.Helper()
	o := launch.Options{
		// The race runtime sleeps 1 s before a clean exit by default.
		Env: append(env[:len(env):len(env)], "GORACE=atexit_sleep_ms=0"),
	}
	if stdin != nil {
		o.Stdin = bytes.NewReader(stdin)
	}
	var out, errb launch.Buffer
	o.Stdout, o.Stderr = &out, &errb
	start := time.Now()
	p, err := launch.Start("producer", Binary(t, "producer"), args, o)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(producerTimeout):
		p.Kill()
		t.Fatalf("producer %v did not exit within %s\nstdout:\n%s\nstderr:\n%s", args, producerTimeout, out.String(), errb.String())
	}
	r := Ran{Args: args, Stdout: out.String(), Stderr: errb.String(), Code: p.ExitCode(), Took: time.Since(start)}
	if strings.Contains(r.Stderr, "panic:") || strings.Contains(r.Stderr, "DATA RACE") {
		t.Fatalf("the producer panicked or raced:\n%s", r)
	}
	return r
}

// Producer runs the producer with the fleet's config.
func (f *Fleet) Producer(stdin []byte, args ...string) Ran {
	f.T.Helper()
	return RunProducer(f.T, f.Env, stdin, append(args, "--config", f.ConfigPath)...)
}

// WriteInput writes a file into the fleet's dir and returns its path.
func (f *Fleet) WriteInput(name, content string) string {
	f.T.Helper()
	p := filepath.Join(f.Dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		f.T.Fatal(err)
	}
	return p
}

// JSONLItems builds n JSON Lines items from a template taking the ID.
func JSONLItems(n int, format string) string {
	var b strings.Builder
	for i := range n {
		id := fmt.Sprintf("item-%04d", i)
		fmt.Fprintf(&b, format+"\n", id)
	}
	return b.String()
}

// WaitSummary reads the figures of the --wait summary.
func WaitSummary(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	i := strings.Index(out, "complete:\n")
	if i < 0 {
		t.Fatalf("no summary in:\n%s", out)
	}
	for _, line := range strings.Split(out[i:], "\n")[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.HasPrefix(line, "  ") || strings.HasPrefix(strings.TrimSpace(line), "- ") {
			break
		}
		got[k] = v
	}
	for _, k := range []string{"Total", "Succeeded", "Failed", "Duration", "Items/s"} {
		if got[k] == "" {
			t.Fatalf("summary lacks %s:\n%s", k, out)
		}
	}
	return got
}

// ParseJSONLines decodes JSON Lines into maps.
func ParseJSONLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// SleepOnlyFleet is a fleet with two credentials and no exec or http job: sleep
// items only.
func SleepOnlyFleet(t *testing.T, workerYAML, queueYAML string) *Fleet {
	t.Helper()
	return NewFleet(t, FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}
- {id: key-b, secret_env: KEY_B, max_concurrent: 2}`,
		Worker: workerYAML,
		Queue:  queueYAML,
		Env:    []string{"KEY_A=sk-a", "KEY_B=sk-b"},
	})
}
