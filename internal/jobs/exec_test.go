package jobs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The exec tests run one after another (no t.Parallel): a script written by
// this process while another goroutine forks could fail with "text file
// busy".

const testSecret = "sk-live-0123456789abcdef"

var (
	testItem = jobs.Item{ID: "item-7", Batch: "batch-1", Kind: "exec", Attempt: 3, Payload: []byte(`{"id":"item-7","text":"héllo"}`)}
	testCred = jobs.Credential{ID: "key-a", Secret: secret.New(testSecret)}
)

// script writes an executable /bin/sh script to a fresh directory and
// returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func newExec(t *testing.T, cfg jobs.ExecConfig) jobs.Handler {
	t.Helper()
	h, err := jobs.NewExec(cfg)
	return built(t, jobs.KindExec, h, err)
}

// runScript runs body as the command for testItem.
func runScript(t *testing.T, body string) (jobs.Output, error) {
	t.Helper()
	h := newExec(t, jobs.ExecConfig{Command: []string{script(t, body)}})
	return h.Run(t.Context(), testItem, testCred)
}

func noSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testSecret) {
		t.Errorf("error text contains the secret: %q", err)
	}
}

func TestExecExitStatus(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		want     jobs.Outcome
		contains []string // in the error text
	}{
		{"0 done", `echo out; echo progress >&2; exit 0`, jobs.OutcomeOK, nil},
		{"75 rate limited", `echo "slow down" >&2; exit 75`, jobs.OutcomeRateLimited, []string{"exit 75", "slow down"}},
		{"77 rejected", "echo 'first line' >&2\necho 'key revoked by provider' >&2\necho >&2\nexit 77", jobs.OutcomeRejected, []string{"key revoked by provider"}},
		{"77 silent", `exit 77`, jobs.OutcomeRejected, []string{"exit 77"}},
		{"65 permanent", `echo "bad input: no field x" >&2; exit 65`, jobs.OutcomePermanent, []string{"exit status 65", "bad input: no field x"}},
		{"1 transient", `echo "network down" >&2; exit 1`, jobs.OutcomeTransient, []string{"exit status 1", "network down"}},
		{"3 transient", `exit 3`, jobs.OutcomeTransient, []string{"exit status 3"}},
		{"signal transient", `kill -KILL $$`, jobs.OutcomeTransient, []string{"signal: killed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runScript(t, tt.body)
			if got := jobs.Classify(err); got != tt.want {
				t.Fatalf("outcome %v (err %v), want %v", got, err, tt.want)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			noSecret(t, err)
			if tt.want == jobs.OutcomeOK && string(out.Body) != "out\n" {
				t.Errorf("output %q, want %q", out.Body, "out\n")
			}
		})
	}

	t.Run("77 reason is bounded", func(t *testing.T) {
		_, err := runScript(t, `printf '%0500d\n' 0 >&2; exit 77`)
		var rj *jobs.RejectedError
		if !errors.As(err, &rj) {
			t.Fatalf("err %v, want rejected", err)
		}
		if len(rj.Reason) > 210 || !strings.HasPrefix(rj.Reason, "0000") {
			t.Errorf("reason is %d bytes: %q", len(rj.Reason), rj.Reason)
		}
	})
	t.Run("stderr tail is bounded", func(t *testing.T) {
		_, err := runScript(t, `i=0; while [ $i -lt 2000 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 1`)
		if err == nil || len(err.Error()) > 2300 || !strings.Contains(err.Error(), "line 1999") {
			t.Errorf("err (%d bytes) should end with the stderr tail: %.200q", len(err.Error()), err)
		}
	})
}

func TestExecRetryAfter(t *testing.T) {
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		body       string
		min, max   time.Duration
		wantSource string
	}{
		{"none", `exit 75`, 0, 0, ""},
		{"seconds", `echo "Retry-After: 7" >&2; exit 75`, 7 * time.Second, 7 * time.Second, "exec stderr Retry-After"},
		{"decimal", `echo "Retry-After: 1.5" >&2; exit 75`, 1500 * time.Millisecond, 1500 * time.Millisecond, "exec stderr Retry-After"},
		{"last wins, any case", "echo 'retry-after: 2' >&2\necho 'other' >&2\necho '  RETRY-AFTER:3  ' >&2\nexit 75", 3 * time.Second, 3 * time.Second, "exec stderr Retry-After"},
		{"no newline", `printf 'Retry-After: 4' >&2; exit 75`, 4 * time.Second, 4 * time.Second, "exec stderr Retry-After"},
		{"http date", fmt.Sprintf(`echo "Retry-After: %s" >&2; exit 75`, future), 55 * time.Minute, time.Hour, "exec stderr Retry-After"},
		{"past date", fmt.Sprintf(`echo "Retry-After: %s" >&2; exit 75`, past), 0, 0, "exec stderr Retry-After"},
		{"garbage", `echo "Retry-After: later" >&2; exit 75`, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runScript(t, tt.body)
			var rl *jobs.RateLimitedError
			if !errors.As(err, &rl) {
				t.Fatalf("err %v, want rate limited", err)
			}
			if rl.RetryAfter < tt.min || rl.RetryAfter > tt.max || rl.Source != tt.wantSource {
				t.Errorf("RetryAfter %v from %q, want %v..%v from %q", rl.RetryAfter, rl.Source, tt.min, tt.max, tt.wantSource)
			}
		})
	}
}

func TestExecStdin(t *testing.T) {
	out, err := runScript(t, `cat`)
	if err != nil || !bytes.Equal(out.Body, testItem.Payload) {
		t.Fatalf("stdout %q, %v; want the payload %q", out.Body, err, testItem.Payload)
	}

	// A payload far larger than a pipe buffer, read in full ...
	big := testItem
	big.Payload = append(append([]byte(`{"blob":"`), bytes.Repeat([]byte("x"), 1<<20)...), `"}`...)
	h := newExec(t, jobs.ExecConfig{Command: []string{script(t, `wc -c`)}})
	out, err = h.Run(t.Context(), big, testCred)
	if err != nil || strings.TrimSpace(string(out.Body)) != strconv.Itoa(len(big.Payload)) {
		t.Errorf("wc -c of a %d-byte payload: %q, %v", len(big.Payload), out.Body, err)
	}
	// ... or not read at all.
	h = newExec(t, jobs.ExecConfig{Command: []string{script(t, `exit 0`)}})
	if _, err := h.Run(t.Context(), big, testCred); err != nil {
		t.Errorf("a command that ignores its stdin: %v", err)
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Setenv("KEY_B_SECRET", "other-credential-secret")
	t.Setenv("KEYFLEET_X", "inherited")
	t.Setenv("KEYFLEET_CREDENTIAL_SECRET", "stale")
	t.Setenv("KEEP_ME", "kept")
	t.Setenv("OVERRIDDEN", "parent")
	h := newExec(t, jobs.ExecConfig{
		// The job's output is scrubbed, so it proves it got the secret by
		// its hash.
		Command:  []string{script(t, `env; printf 'SECRET_SHA256=%s\n' "$(printf %s "$KEYFLEET_CREDENTIAL_SECRET" | sha256sum | cut -d' ' -f1)"`)},
		Env:      map[string]string{"EXTRA": "a=b c", "OVERRIDDEN": "child"},
		ScrubEnv: []string{"KEY_B_SECRET", "NOT_SET_ANYWAY"},
	})
	out, err := h.Run(t.Context(), testItem, testCred)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string][]string{}
	for _, line := range strings.Split(string(out.Body), "\n") {
		if name, value, ok := strings.Cut(line, "="); ok {
			env[name] = append(env[name], value)
		}
	}
	want := map[string]string{
		"KEYFLEET_ITEM_ID":           "item-7",
		"KEYFLEET_BATCH":             "batch-1",
		"KEYFLEET_ATTEMPT":           "3",
		"KEYFLEET_CREDENTIAL_ID":     "key-a",
		"KEYFLEET_CREDENTIAL_SECRET": secret.Redacted, // scrubbed from the output
		"SECRET_SHA256":              fmt.Sprintf("%x", sha256.Sum256([]byte(testSecret))),
		"KEYFLEET_KIND":              "exec",
		"EXTRA":                      "a=b c",
		"OVERRIDDEN":                 "child",
		"KEEP_ME":                    "kept",
		"PATH":                       os.Getenv("PATH"),
	}
	for name, v := range want {
		if got := env[name]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want [%q]", name, got, v)
		}
	}
	for _, name := range []string{"KEY_B_SECRET", "KEYFLEET_X"} {
		if got, ok := env[name]; ok {
			t.Errorf("%s is visible to the job: %q", name, got)
		}
	}
}

func TestExecOutputBound(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		body      string
		wantLen   int
		truncated bool
	}{
		{"over the bound", 1000, `head -c 300000 /dev/zero; echo done >&2`, 1000, true},
		{"at the bound", 1000, `head -c 1000 /dev/zero`, 1000, false},
		{"under the bound", 1000, `head -c 10 /dev/zero`, 10, false},
		{"default bound", 0, `head -c 1000000 /dev/zero`, jobs.MaxOutputDefault, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newExec(t, jobs.ExecConfig{Command: []string{script(t, tt.body)}, MaxOutput: tt.max})
			out, err := h.Run(t.Context(), testItem, testCred)
			if err != nil || len(out.Body) != tt.wantLen || out.Truncated != tt.truncated {
				t.Errorf("got %d bytes, truncated %v, err %v; want %d, %v", len(out.Body), out.Truncated, err, tt.wantLen, tt.truncated)
			}
		})
	}
}

// groupScript starts a grandchild that would outlive the command, writes
// its PID to the file named by $1, and then runs tail.
func groupScript(t *testing.T, tail string) (cmd []string, pidFile string) {
	pidFile = filepath.Join(t.TempDir(), "grandchild.pid")
	return []string{script(t, "sleep 300 &\necho $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"+tail), pidFile}, pidFile
}

// readPID waits for the grandchild's PID file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file: %v", err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file after 20s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alive reports whether pid runs: it exists and is not a zombie waiting
// for a parent (in a container, PID 1 may never reap it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// waitDead waits until pid has died; SIGKILL takes effect asynchronously.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("grandchild %d still alive 10s after Run returned", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	cmd, pidFile := groupScript(t, "wait")
	h := newExec(t, jobs.ExecConfig{Command: cmd, Timeout: 2 * time.Second})
	start := time.Now()
	_, err := h.Run(t.Context(), testItem, testCred)
	elapsed := time.Since(start)
	if got := jobs.Classify(err); got != jobs.OutcomeTransient || !strings.Contains(err.Error(), "timed out after 2s") {
		t.Fatalf("err %v (%v), want transient 'timed out after 2s'", err, got)
	}
	if elapsed > 15*time.Second {
		t.Errorf("Run took %v with a 2s timeout", elapsed)
	}
	waitDead(t, readPID(t, pidFile))
}

func TestExecCancelKillsGroup(t *testing.T) {
	cmd, pidFile := groupScript(t, "wait")
	h := newExec(t, jobs.ExecConfig{Command: cmd})
	cause := errors.New("worker shutting down")
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := h.Run(ctx, testItem, testCred)
		done <- err
	}()
	pid := readPID(t, pidFile)
	if !alive(pid) {
		t.Fatalf("grandchild %d is not running before the cancel", pid)
	}
	cancel(cause)
	err := testutil.Receive(t, done, 15*time.Second, "Run did not return 15s after the cancel")
	if !errors.Is(err, cause) || !errors.Is(err, context.Canceled) || jobs.Classify(err) != jobs.OutcomeTransient {
		t.Errorf("err %v: want transient, wrapping the cause and context.Canceled", err)
	}
	waitDead(t, pid)

	ctx, cancel = context.WithCancelCause(t.Context())
	cancel(cause)
	if _, err := h.Run(ctx, testItem, testCred); !errors.Is(err, cause) {
		t.Errorf("already cancelled: err %v, want the cause", err)
	}
}

func TestExecKillsLeftovers(t *testing.T) {
	cmd, pidFile := groupScript(t, "echo started; exit 0")
	h := newExec(t, jobs.ExecConfig{Command: cmd})
	start := time.Now()
	out, err := h.Run(t.Context(), testItem, testCred)
	if err != nil || string(out.Body) != "started\n" {
		t.Fatalf("Run: %q, %v", out.Body, err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Run took %v: it waited for the leftover process", d)
	}
	waitDead(t, readPID(t, pidFile))
}

func TestExecRelativeCommandAndDir(t *testing.T) {
	path := script(t, `pwd; echo "$@"`)
	dir := filepath.Dir(path)
	h := newExec(t, jobs.ExecConfig{Command: []string{"./job.sh", "a b", "c"}, Dir: dir})
	out, err := h.Run(t.Context(), testItem, testCred)
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || (string(out.Body) != dir+"\na b c\n" && string(out.Body) != real+"\na b c\n") {
		t.Errorf("got %q, %v; want the dir and the arguments", out.Body, err)
	}
}

func TestExecSecretNotInErrors(t *testing.T) {
	h := newExec(t, jobs.ExecConfig{Command: []string{script(t, `sleep 5`)}, Timeout: 100 * time.Millisecond})
	_, err := h.Run(t.Context(), testItem, testCred)
	noSecret(t, err)
	if msg := fmt.Sprintf("%v %+v %#v", testCred, testCred, testCred); strings.Contains(msg, testSecret) {
		t.Errorf("a credential prints its secret: %s", msg)
	}

	bad := testItem
	bad.ID = "a\x00b"
	if _, err := h.Run(t.Context(), bad, testCred); jobs.Classify(err) != jobs.OutcomePermanent {
		t.Errorf("NUL in item id: %v, want permanent", err)
	}
}

func TestNewExecErrors(t *testing.T) {
	ok := script(t, `exit 0`)
	notExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  jobs.ExecConfig
		want string
	}{
		{"no command", jobs.ExecConfig{}, "exec: command: must name the program"},
		{"empty program", jobs.ExecConfig{Command: []string{""}}, "command[0]"},
		{"not in PATH", jobs.ExecConfig{Command: []string{"keyfleet-no-such-program"}}, "command[0]"},
		{"missing file", jobs.ExecConfig{Command: []string{"/nonexistent/job.sh"}}, "command[0]"},
		{"not executable", jobs.ExecConfig{Command: []string{notExec}}, "not executable"},
		{"negative timeout", jobs.ExecConfig{Command: []string{ok}, Timeout: -time.Second}, "timeout"},
		{"negative max output", jobs.ExecConfig{Command: []string{ok}, MaxOutput: -1}, "max output"},
		{"missing dir", jobs.ExecConfig{Command: []string{ok}, Dir: "/nonexistent"}, "exec: dir"},
		{"dir is a file", jobs.ExecConfig{Command: []string{ok}, Dir: ok}, "not a directory"},
		{"bad env name", jobs.ExecConfig{Command: []string{ok}, Env: map[string]string{"A=B": "x"}}, "env"},
		{"reserved env", jobs.ExecConfig{Command: []string{ok}, Env: map[string]string{"KEYFLEET_CREDENTIAL_SECRET": "x"}}, "KEYFLEET_CREDENTIAL_SECRET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := jobs.NewExec(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || h != nil {
				t.Errorf("NewExec: %v, %v; want an error containing %q", h, err, tt.want)
			}
		})
	}
	if _, err := jobs.NewExec(jobs.ExecConfig{Command: []string{"sh", "-c", "exit 0"}}); err != nil {
		t.Errorf("a program from PATH: %v", err)
	}
}

// A secret the job prints is scrubbed before any bound cuts the output, so
// no fragment of it survives at the cut: in stdout, in the stderr tail and
// in the exit-77 reason, wherever the cut falls.
func TestExecNoSecretFragmentAtACut(t *testing.T) {
	const limit = 64
	frag := testSecret[:6]
	for pad := limit - len(testSecret) - 2; pad <= limit+2; pad++ {
		h := newExec(t, jobs.ExecConfig{
			Command:   []string{script(t, fmt.Sprintf(`head -c %d /dev/zero | tr '\\0' x; printf '%%s' "$KEYFLEET_CREDENTIAL_SECRET"`, pad))},
			MaxOutput: limit,
		})
		out, err := h.Run(t.Context(), testItem, testCred)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out.Body), frag) {
			t.Fatalf("pad %d: stdout keeps a fragment of the secret: %q", pad, out.Body)
		}
	}
	// stderr: a secret ending just inside the 2 KiB tail, and a long
	// exit-77 reason line with the secret across its 200-byte cut.
	for _, body := range []string{
		`printf '%s' "$KEYFLEET_CREDENTIAL_SECRET" >&2; head -c 2040 /dev/zero | tr '\\0' y >&2; exit 65`,
		`head -c 190 /dev/zero | tr '\\0' z >&2; printf '%s\\n' "$KEYFLEET_CREDENTIAL_SECRET" >&2; exit 77`,
	} {
		h := newExec(t, jobs.ExecConfig{Command: []string{script(t, body)}})
		_, err := h.Run(t.Context(), testItem, testCred)
		if err == nil || strings.Contains(err.Error(), frag) {
			t.Fatalf("error text keeps a fragment of the secret: %v", err)
		}
	}
}

// A Cost line reports the run's real cost whatever the exit status; a
// Retry-After line on exit 0 still rests the key.
func TestExecReportsCostAndRest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body    string
		cost    int64
		note    string
		rest    time.Duration
		outcome jobs.Outcome
	}{
		{"echo out; echo 'cost: 12' >&2; echo 'Cost: 1500.2' >&2", 1501, "", 0, jobs.OutcomeOK},
		{"echo 'Cost: lots' >&2", 0, `unreadable Cost line "lots"`, 0, jobs.OutcomeOK},
		{"echo 'Retry-After: 7' >&2", 0, "", 7 * time.Second, jobs.OutcomeOK},
		{"echo 'Cost: 40' >&2; exit 1", 40, "", 0, jobs.OutcomeTransient},
	} {
		out, err := runScript(t, c.body)
		if out.Cost != c.cost || !strings.Contains(out.CostNote, c.note) || out.Rest != c.rest || jobs.Classify(err) != c.outcome {
			t.Errorf("%s: cost %d (%q), rest %s, %v; want cost %d, note %q, rest %s, %s",
				c.body, out.Cost, out.CostNote, out.Rest, err, c.cost, c.note, c.rest, c.outcome)
		}
	}
}
