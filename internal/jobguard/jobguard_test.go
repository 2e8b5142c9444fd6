package jobguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
)

// helperEnv makes the test binary a "worker" that starts guarded jobs and
// waits to be killed (TestSIGKILLOfTheWorkerKillsItsJobs).
const helperEnv = "JOBGUARD_TEST_WORKER_DIR"

func TestMain(m *testing.M) {
	RunIfGuard() // New re-executes this test binary as the guard
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperWorker(dir))
	}
	os.Exit(m.Run())
}

// deathBound is the promise: job processes die within a second of their
// worker.
const deathBound = time.Second

// helperWorker starts, under a guard, a shell job with a child `sleep 60`
// and a job that is `sleep 60` itself; and, with no guard (Pdeathsig
// alone), one more `sleep 60`. It writes their PIDs and the guard's into
// dir, then waits to be killed.
func helperWorker(dir string) int {
	g, err := New(Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, c := range []struct {
		g    *Guard
		name string
		args []string
	}{
		{g, "shell", []string{"sh", "-c", `sleep 60 & echo "$$ $!" > "$0/shell.tmp" && mv "$0/shell.tmp" "$0/shell"; wait`, dir}},
		{g, "direct", []string{"sh", "-c", `echo "$$" > "$0/direct.tmp" && mv "$0/direct.tmp" "$0/direct"; exec sleep 60`, dir}},
		{nil, "unguarded", []string{"sh", "-c", `echo "$$" > "$0/unguarded.tmp" && mv "$0/unguarded.tmp" "$0/unguarded"; exec sleep 60`, dir}},
	} {
		if err := c.g.Start(exec.Command(c.args[0], c.args[1:]...)); err != nil {
			fmt.Fprintln(os.Stderr, c.name, err)
			return 1
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "guard"), []byte(strconv.Itoa(g.pid())), 0o644); err != nil {
		return 1
	}
	select {}
}

func (g *Guard) pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc == nil {
		return 0
	}
	return g.proc.cmd.Process.Pid
}

// alive reports whether pid runs: it exists and is no zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// pidsIn waits for the file dir/name and returns the PIDs it lists.
func pidsIn(t *testing.T, dir, name string) []int {
	t.Helper()
	var pids []int
	testutil.WaitFor(t, name+" to be written", 20*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s: %q", name, b)
			}
			pids = append(pids, n)
		}
		return len(pids) > 0
	})
	return pids
}

// waitDead waits up to bound for every pid to be gone, failing the test
// (and killing the survivors) otherwise; it returns how long it took.
func waitDead(t *testing.T, bound time.Duration, pids ...int) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var living []int
		for _, p := range pids {
			if alive(p) {
				living = append(living, p)
			}
		}
		if len(living) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			for _, p := range living {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still running %s later", living, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startShellJob starts, under g, a shell that starts `sleep 60` and waits
// for it; it returns the command and the shell's and sleep's PIDs.
func startShellJob(t *testing.T, g *Guard) (*exec.Cmd, int, int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `sleep 60 & echo "$$ $!" > "$0/p.tmp" && mv "$0/p.tmp" "$0/p"; wait`, dir)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	pids := pidsIn(t, dir, "p")
	if len(pids) != 2 || pids[0] != cmd.Process.Pid {
		t.Fatalf("pids %v, want the shell's (%d) and its child's", pids, cmd.Process.Pid)
	}
	return cmd, pids[0], pids[1]
}

func newGuard(t *testing.T, o Options) *Guard {
	t.Helper()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// A SIGKILLed worker: the guard kills its jobs' whole groups (the shell's
// child included), Pdeathsig the direct children, and the guard exits.
func TestSIGKILLOfTheWorkerKillsItsJobs(t *testing.T) {
	dir := t.TempDir()
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), helperEnv+"="+dir)
	worker.Stderr = os.Stderr
	worker.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	shell := pidsIn(t, dir, "shell")
	direct := pidsIn(t, dir, "direct")
	unguarded := pidsIn(t, dir, "unguarded")
	guard := pidsIn(t, dir, "guard")
	jobs := append(append(append([]int(nil), shell...), direct...), unguarded...)
	for _, p := range append(jobs, guard...) {
		if !alive(p) {
			t.Fatalf("%d is not running before the kill", p)
		}
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	took := waitDead(t, deathBound, jobs...)
	// The guard exits once it has killed them (a -race binary sleeps a
	// second on exit first).
	waitDead(t, 5*time.Second, guard...)
	t.Logf("shell job %v, direct job %v and unguarded job %v gone %s after the worker's SIGKILL",
		shell, direct, unguarded, took.Round(time.Millisecond))
}

// Close (every orderly way out of the worker) kills what is registered.
func TestCloseKillsRegisteredGroups(t *testing.T) {
	g := newGuard(t, Options{})
	cmd, sh, child := startShellJob(t, g)
	guard := g.pid()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, deathBound, child)
	waitDead(t, 5*time.Second, guard)
	err := g.Wait(cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the shell (%d) ended with %v, want killed by SIGKILL", sh, err)
	}
	if err := g.Register(cmd.Process.Pid); !errors.Is(err, ErrClosed) {
		t.Fatalf("Register after Close: %v, want ErrClosed", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// KillAll kills from the worker itself and leaves the groups registered
// until their runs end.
func TestKillAll(t *testing.T) {
	g := newGuard(t, Options{})
	cmd, _, child := startShellJob(t, g)
	g.KillAll()
	waitDead(t, deathBound, child)
	_ = g.Wait(cmd)
	if n := registered(g); n != 0 {
		t.Fatalf("%d groups still registered after Wait", n)
	}
}

func registered(g *Guard) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.groups)
}

// Wait kills what the command left in its group and unregisters it.
func TestWaitKillsWhatTheCommandLeft(t *testing.T) {
	g := newGuard(t, Options{})
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `sleep 60 & echo "$!" > "$0/p.tmp" && mv "$0/p.tmp" "$0/p"`, dir)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	child := pidsIn(t, dir, "p")[0]
	if err := g.Wait(cmd); err != nil {
		t.Fatalf("Wait: %v (the shell exited 0)", err)
	}
	waitDead(t, deathBound, child)
	if n := registered(g); n != 0 {
		t.Fatalf("%d groups still registered after Wait", n)
	}
}

// An unregistered group is never killed by the guard.
func TestUnregisteredGroupIsLeftAlone(t *testing.T) {
	g := newGuard(t, Options{})
	cmd, sh, child := startShellJob(t, g)
	g.Unregister(sh)
	guard := g.pid()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// The guard has exited: it did all it was going to do.
	waitDead(t, 5*time.Second, guard)
	if !alive(sh) || !alive(child) {
		t.Fatalf("the guard killed an unregistered group (shell alive %v, child alive %v)", alive(sh), alive(child))
	}
	_ = syscall.Kill(-sh, syscall.SIGKILL)
	_ = g.Wait(cmd)
}

// SIGTERM, SIGINT and SIGHUP while the worker lives (a terminal's Ctrl-C, a
// supervisor signalling every process) leave the guard and the jobs be:
// the worker's own shutdown decides.
func TestSignalsWhileTheWorkerLivesAreIgnored(t *testing.T) {
	g := newGuard(t, Options{})
	cmd, sh, child := startShellJob(t, g)
	guard := g.pid()
	for _, s := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(guard, s); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the signals to be delivered", 5*time.Second, func() bool { return noPendingSignals(guard) })
	// Acting on one would kill the groups at once; give it a moment to.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if !alive(guard) || !alive(sh) || !alive(child) {
			t.Fatalf("guard alive %v, shell alive %v, child alive %v after signals while the worker lives",
				alive(guard), alive(sh), alive(child))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, deathBound, child)
	_ = g.Wait(cmd)
}

// noPendingSignals reports whether pid has no signal waiting to be
// delivered.
func noPendingSignals(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ":")
		if (name == "SigPnd" || name == "ShdPnd") && strings.Trim(strings.TrimSpace(v), "0") != "" {
			return false
		}
	}
	return true
}

// A guard process that dies is replaced, and the new one knows every
// registered group.
func TestGuardProcessIsRestarted(t *testing.T) {
	var mu sync.Mutex
	var reports []string
	g := newGuard(t, Options{OnError: func(err error) {
		mu.Lock()
		reports = append(reports, err.Error())
		mu.Unlock()
	}})
	cmd, _, child := startShellJob(t, g)
	first := g.pid()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "another guard process", 10*time.Second, func() bool {
		p := g.pid()
		return p != 0 && p != first
	})
	mu.Lock()
	got := strings.Join(reports, "\n")
	mu.Unlock()
	if !strings.Contains(got, "exited unexpectedly") || !strings.Contains(got, "1 process groups registered again") {
		t.Fatalf("reports: %q", got)
	}
	second := g.pid()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, deathBound, child)
	waitDead(t, 5*time.Second, second)
	_ = g.Wait(cmd)
}

func TestRegisterRefusesWhatIsNoGroup(t *testing.T) {
	g := newGuard(t, Options{})
	for _, pgid := range []int{-7, -1, 0, 1} {
		if err := g.Register(pgid); err == nil {
			t.Errorf("Register(%d) = nil, want an error", pgid)
		}
	}
	if n := registered(g); n != 0 {
		t.Fatalf("%d groups registered", n)
	}
}

// A nil Guard guards nothing but still starts commands in their own group
// and kills the group when its leader exits.
func TestNilGuard(t *testing.T) {
	var g *Guard
	if err := g.Register(42); err != nil {
		t.Fatal(err)
	}
	g.Unregister(42)
	g.KillAll()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `sleep 60 & echo "$!" > "$0/p.tmp" && mv "$0/p.tmp" "$0/p"`, dir)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	child := pidsIn(t, dir, "p")[0]
	if pgid, _ := syscall.Getpgid(child); pgid != cmd.Process.Pid {
		t.Fatalf("child's group %d, want the command's own %d", pgid, cmd.Process.Pid)
	}
	if err := g.Wait(cmd); err != nil {
		t.Fatal(err)
	}
	waitDead(t, deathBound, child)
}

// The guard process gets none of the worker's environment (its secrets).
func TestGuardEnvironmentHoldsNoSecrets(t *testing.T) {
	t.Setenv("KEY_A", "sk-test-secret")
	g := newGuard(t, Options{})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", g.pid()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), EnvVar+"=1\x00"; got != want {
		t.Fatalf("guard environment %q, want %q", got, want)
	}
}
