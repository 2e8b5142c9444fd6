package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// Options say how to start a process.
type Options struct {
	// Env is its whole environment; nil: this program's.
	Env []string
	// Dir is its working directory; "": this program's.
	Dir string
	// Stdin is its standard input; nil: none.
	Stdin io.Reader
	// Stdout and Stderr take its output; nil: discarded. They may be the
	// same writer (a *Buffer, or a file).
	Stdout, Stderr io.Writer
	// OwnGroup puts it in a process group of its own, so that a Ctrl-C on
	// the terminal reaches only this program, which then stops it.
	OwnGroup bool
}

// Proc is a child process. It is killed when this program dies
// (Pdeathsig), whatever the way.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	exited  atomic.Bool // set just before done is closed
	err     error       // of Wait, once exited
}

// Start starts bin with args; name names it in errors.
func Start(name, bin string, args []string, o Options) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = o.Env, o.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: o.OwnGroup}
	p := &Proc{name: name, cmd: cmd, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		p.exited.Store(true)
		close(p.done)
	}()
	return p, nil
}

// Name is the name it was started under.
func (p *Proc) Name() string { return p.name }

// Pid is its process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Started is when it was started.
func (p *Proc) Started() time.Time { return p.started }

// Done is closed once it has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether it has exited.
func (p *Proc) Exited() bool { return p.exited.Load() }

// Err is how it ended (exec.Cmd.Wait's error); nil while it runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// ExitCode is its exit code; -1 while it runs or when a signal ended it.
func (p *Proc) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// State is its process state once it has exited (CPU times), else nil.
func (p *Proc) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Signal sends it s; an error once it has exited.
func (p *Proc) Signal(s os.Signal) error {
	if p.Exited() {
		return fmt.Errorf("launch: %s already exited", p.name)
	}
	return p.cmd.Process.Signal(s)
}

// Wait waits for it to exit, at most d, and returns Err.
func (p *Proc) Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return fmt.Errorf("launch: %s did not exit within %s", p.name, d)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Stop sends SIGTERM and waits up to grace, then kills it.
func (p *Proc) Stop(ctx context.Context, grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.Wait(ctx, grace); err != nil && !p.Exited() {
		p.Kill()
		return err
	}
	return p.err
}

// Kill ends it now and reaps it.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
