// Package jobguard makes sure the processes a worker starts for its jobs
// do not outlive it, however it ends (docs/handlers.md: a job never
// outlives its worker; a stray job keeps its credential's secret and keeps
// using the key while its item runs again elsewhere).
//
// Two mechanisms, because each alone falls short:
//
//   - Every job process is started in a process group of its own with a
//     parent-death signal (Pdeathsig SIGKILL): the kernel kills it when the
//     worker dies, SIGKILL included. That reaches only the direct child,
//     not what it started (a shell script's `sleep 60`).
//   - The guard: one helper process per worker (the worker's own binary
//     re-executed, see RunIfGuard), connected by a pipe. The worker writes
//     "+<pgid>\n" when a job's process group starts and "-<pgid>\n" when it
//     ends. When the pipe reaches end of file — the worker exited or was
//     killed, since nothing else holds its write end — the guard kills every
//     group still registered with SIGKILL and exits. It costs one process per
//     worker, not one per item.
//
// # Process group IDs are never reused under the guard
//
// A group's ID is its leader's PID, and Linux does not hand out a number
// while any process, zombies included, still uses it as a PID or a process
// group ID. The leader is the worker's child, so the ID stays reserved until
// the worker reaps it. Wait keeps that order: it waits for the leader to
// exit without reaping it (waitid WNOWAIT), kills what is left in the
// group, unregisters the group, and only then reaps the leader. The pipe
// is in order, so the guard reads "-<pgid>" before the number can be
// reused. The one window left: when the worker itself dies, init reaps its
// job leaders while the guard reads the end of the pipe; for a number to
// be reused in those few milliseconds the system would have to run through
// every PID (pid_max) in them.
//
// # Pdeathsig and threads
//
// Linux sends the parent-death signal when the thread that forked the
// child ends, not the process (go.dev/issue/27505). The Go runtime ends a
// thread only when a goroutine that locked it (runtime.LockOSThread) exits
// without unlocking; neither keyfleet nor the libraries the worker links
// lock a thread, so the signal comes when the worker dies. Were it to come
// early, a job would be killed and its item retried: a spurious failure,
// never a process left behind. The guard process itself gets SIGTERM as
// its parent-death signal and checks that its parent is really gone before
// acting on it (a SIGTERM or SIGINT from anyone else, while the worker
// lives, is ignored: the worker's own shutdown decides what happens to its
// jobs).
//
// What is out of reach: a process that leaves its job's process group
// (setsid, setpgid) is not killed; and a grandchild a job forks in the
// microseconds between its start and its registration survives a SIGKILL
// of the worker in that instant (its parent does not: Pdeathsig).
package jobguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// EnvVar, set to "1" in the guard process's environment (and its only
// variable), makes the worker binary run as the guard; see RunIfGuard.
const EnvVar = "KEYFLEET_JOB_GUARD"

// processName is the guard's argv[0], as ps shows it.
const processName = "keyfleet-job-guard"

// What the guard writes on its stdout: once it listens, and once it has
// killed the groups at the end of its pipe (it may take a while longer to
// exit: a binary built with -race sleeps a second on exit).
const (
	readyLine = "ready"
	doneLine  = "done"
)

// Bounds on waiting for the guard process.
const (
	readyTimeout = 10 * time.Second // for it to say it is ready
	closeTimeout = 5 * time.Second  // for it to kill the groups once its pipe is closed
)

// ErrClosed is returned by Register after Close.
var ErrClosed = errors.New("jobguard: closed")

// Options configure a Guard.
type Options struct {
	// OnError reports what befalls the guard process after New: that it
	// exited unexpectedly and was started again, or could not be. It is
	// called with the Guard's lock held: it must not call the Guard. Nil:
	// not reported.
	OnError func(error)
}

// Guard is the worker's side of the job guard. Its methods are safe for
// concurrent use, and a nil *Guard is valid: it guards nothing, but Start
// still gives the command a process group and a parent-death signal, and
// Wait still kills the group before reaping its leader.
type Guard struct {
	onError func(error)

	mu     sync.Mutex
	groups map[int]struct{} // registered process groups
	proc   *guardProcess    // nil when not running
	closed bool
}

// guardProcess is one run of the guard process.
type guardProcess struct {
	cmd  *exec.Cmd
	w    *os.File      // the pipe to its stdin
	out  *bufio.Reader // its stdout
	outF *os.File
	done chan struct{} // closed once it has exited and been reaped
}

// New starts the guard process and returns once it listens.
func New(o Options) (*Guard, error) {
	g := &Guard{onError: o.OnError, groups: map[int]struct{}{}}
	p, err := spawn()
	if err != nil {
		return nil, err
	}
	g.proc = p
	go g.watch(p)
	return g, nil
}

// spawn starts a guard process and waits for it to say it is ready.
func spawn() (*guardProcess, error) {
	path, err := executable()
	if err != nil {
		return nil, fmt.Errorf("jobguard: %w", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("jobguard: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("jobguard: %w", err)
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: []string{processName},
		// Nothing of the worker's environment: it holds the secrets.
		Env:    []string{EnvVar + "=1"},
		Stdin:  inR,
		Stdout: readyW,
		Stderr: os.Stderr,
		// A group of its own: a signal to the worker's group (a Ctrl-C,
		// a supervisor's kill of the group) leaves the guard to do its work.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	setDeathSignal(cmd.SysProcAttr, syscall.SIGTERM)
	err = cmd.Start()
	inR.Close()
	readyW.Close()
	if err != nil {
		inW.Close()
		readyR.Close()
		return nil, fmt.Errorf("jobguard: start the guard process: %w", err)
	}
	p := &guardProcess{cmd: cmd, w: inW, out: bufio.NewReader(readyR), outF: readyR, done: make(chan struct{})}
	_ = readyR.SetReadDeadline(time.Now().Add(readyTimeout))
	line, err := p.out.ReadString('\n')
	if err != nil || line != readyLine+"\n" {
		p.kill()
		return nil, fmt.Errorf("jobguard: the guard process (%s) did not say it was ready: %q %v", path, line, err)
	}
	return p, nil
}

// kill ends the process and reaps it; for a process not yet watched.
func (p *guardProcess) kill() {
	_ = p.w.Close()
	_ = p.outF.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// watch reaps the guard process; if it exits while the Guard is open, it
// starts another and registers every group with it again.
func (g *Guard) watch(p *guardProcess) {
	err := p.cmd.Wait()
	_ = p.outF.Close()
	close(p.done)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.proc != p {
		return
	}
	g.restartLocked(fmt.Errorf("jobguard: the guard process exited unexpectedly (%v)", err))
}

// restartLocked replaces the guard process, telling it every registered
// group, and reports why through OnError.
func (g *Guard) restartLocked(why error) error {
	if old := g.proc; old != nil {
		_ = old.w.Close() // the process has exited, or exits on this
		g.proc = nil
	}
	p, err := spawn()
	if err == nil {
		for pgid := range g.groups {
			if err = p.send('+', pgid); err != nil {
				break
			}
		}
		if err != nil {
			p.kill()
		}
	}
	if err != nil {
		err = fmt.Errorf("%w; starting another failed, job processes are not guarded against a SIGKILL of the worker: %w", why, err)
		g.report(err)
		return err
	}
	g.proc = p
	go g.watch(p)
	g.report(fmt.Errorf("%w; started another, %d process groups registered again", why, len(g.groups)))
	return nil
}

func (g *Guard) report(err error) {
	if g.onError != nil {
		g.onError(err)
	}
}

func (p *guardProcess) send(op byte, pgid int) error {
	b := strconv.AppendInt([]byte{op}, int64(pgid), 10)
	_, err := p.w.Write(append(b, '\n'))
	return err
}

// Register puts the process group pgid under the guard: if this process
// dies, the guard kills the group. The group's leader must be a child of
// this process not yet reaped, and stay so until Unregister returns (Start
// and Wait keep to that), so that its ID cannot be reused meanwhile.
func (g *Guard) Register(pgid int) error {
	if g == nil {
		return nil
	}
	if pgid <= 1 {
		return fmt.Errorf("jobguard: %d is not a process group the guard may kill", pgid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.groups[pgid] = struct{}{}
	if g.proc == nil {
		return errors.New("jobguard: the guard process is not running")
	}
	if err := g.proc.send('+', pgid); err != nil {
		// The guard died and watch has not replaced it yet: replace it
		// here; the new one is told of every group, this one included.
		return g.restartLocked(fmt.Errorf("jobguard: the guard process is gone (%w)", err))
	}
	return nil
}

// Unregister takes the group off the guard. Call it before reaping the
// group's leader.
func (g *Guard) Unregister(pgid int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.groups[pgid]; !ok {
		return
	}
	delete(g.groups, pgid)
	if g.proc != nil {
		// An error means the guard is gone: it kills nothing any more, and
		// the one that replaces it is not told of this group.
		_ = g.proc.send('-', pgid)
	}
}

// KillAll sends SIGKILL to every registered group, from this process,
// now: for a worker about to exit in a hurry (a second signal, a panic).
// The groups stay registered until their runs unregister them.
func (g *Guard) KillAll() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for pgid := range g.groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// Close ends the guard: it closes the pipe, on which the guard process
// kills every group still registered and exits, and waits until it says
// it has killed them (up to a bound). Register fails after it. Safe to
// call twice.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	p := g.proc
	g.proc = nil
	g.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.w.Close()
	// "done", or the end of its stdout if it died (watch closes our end
	// once it has reaped it).
	_ = p.outF.SetReadDeadline(time.Now().Add(closeTimeout))
	line, err := p.out.ReadString('\n')
	if line == doneLine+"\n" || errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
		return nil
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("jobguard: the guard process did not kill the job process groups within %s of its pipe closing (%q %v)", closeTimeout, line, err)
}

// Start starts cmd in a process group of its own, with SIGKILL as its
// parent-death signal, and registers the group. Its other SysProcAttr
// settings are kept. The caller must end the run with Wait, not cmd.Wait.
// If the group cannot be registered, the command is killed and reaped and
// the error returned.
//
// The calling goroutine must not have locked its OS thread (see the
// package comment).
func (g *Guard) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	setDeathSignal(cmd.SysProcAttr, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := g.Register(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = g.Wait(cmd)
		return err
	}
	return nil
}

// Wait waits for a command started by Start to exit, kills whatever it
// left running in its process group, unregisters the group and reaps the
// command (cmd.Wait, whose error it returns) — in that order, so the
// group's ID is reserved (by the unreaped leader) while it is killed and
// while the guard still knows it.
func (g *Guard) Wait(cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	if err := awaitExit(pid); err != nil {
		// This system cannot wait without reaping: reap first. The group
		// ID may then be free for the instant between Wait and the kill.
		werr := cmd.Wait()
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		g.Unregister(pid)
		return werr
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	g.Unregister(pid)
	return cmd.Wait()
}
