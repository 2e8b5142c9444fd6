package launch_test

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

func TestProc(t *testing.T) {
	ctx := context.Background()
	var out launch.Buffer
	p, err := launch.Start("echo", "sh", []string{"-c", "echo hello; echo oops >&2; exit 3"}, launch.Options{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx, 10*time.Second); err == nil || p.ExitCode() != 3 {
		t.Fatalf("Wait: %v, exit code %d; want exit code 3", err, p.ExitCode())
	}
	if got := out.String(); got != "hello\noops\n" {
		t.Fatalf("output %q", got)
	}
	// Stop: SIGTERM first; a process that ignores it is killed after the grace.
	var trapped launch.Buffer
	p, err = launch.Start("stubborn", "sh", []string{"-c", "trap '' TERM; echo trapped; exec sleep 30"}, launch.Options{OwnGroup: true, Stdout: &trapped})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the shell to set its trap", 10*time.Second, func() bool { return strings.Contains(trapped.String(), "trapped") })
	if err := p.Stop(ctx, 200*time.Millisecond); err == nil || !p.Exited() {
		t.Fatalf("Stop of a process ignoring SIGTERM: %v, exited %v", err, p.Exited())
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Fatal("Signal after the exit: want an error")
	}
	p.Kill() // safe after the exit
	if _, err := launch.Start("missing", "/nonexistent/bin", nil, launch.Options{}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing binary: %v", err)
	}
}

func TestRedis(t *testing.T) {
	ctx := context.Background()
	r, err := launch.StartRedis(ctx, launch.RedisOptions{Dir: t.TempDir(), Args: []string{"--requirepass", "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if !strings.HasPrefix(r.URL(), "redis://:pw@127.0.0.1:") {
		t.Fatalf("URL %q", r.URL())
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: r.Password()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port := r.Port()
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 || r.Port() != port {
		t.Fatalf("after Restart: exists %d, err %v, port %d (was %d)", n, err, r.Port(), port)
	}
	r.Stop()
	r.Stop()
	if r.Proc() != nil {
		t.Fatal("Proc after Stop")
	}
	if _, err := launch.StartRedis(ctx, launch.RedisOptions{Dir: t.TempDir(), Args: []string{"--no-such-option", "x"}}); err == nil ||
		!strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("a bad argument: %v", err)
	}
}

func TestNATS(t *testing.T) {
	n, err := launch.StartNATS(launch.JetStreamOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	port := n.Port()
	n.Shutdown()
	if n.Server() != nil {
		t.Fatal("Server after Shutdown")
	}
	if err := n.StartAgain(); err != nil || n.Port() != port {
		t.Fatalf("StartAgain: %v, port %d (was %d)", err, n.Port(), port)
	}
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// A server that must have its port (reserved, or its own before a
// restart) and finds it held for a moment by someone else (a parallel
// test between FreePort and the listen) starts on it once it is let go.
func TestNATSStartsOnItsPortOnceLetGo(t *testing.T) {
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := launch.JetStreamOptions(t.TempDir())
	o.Port = squatter.Addr().(*net.TCPAddr).Port
	n := launch.NewNATS(o)
	started := make(chan error, 1)
	go func() { started <- n.Start() }()
	time.Sleep(300 * time.Millisecond) // the port stays taken a while: a duration, not a wait for a condition
	_ = squatter.Close()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start on a port let go after 300ms: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return within 20s of its port being let go")
	}
	defer n.Shutdown()
	if n.Port() != o.Port {
		t.Fatalf("started on port %d, want %d", n.Port(), o.Port)
	}
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
