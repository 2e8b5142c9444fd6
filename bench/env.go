package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// env is the program's servers, binaries and temporary directory.
type env struct {
	opts Options
	dir  string // temporary; removed by close

	natsBin, workerBin, producerBin string

	natsURL, redisURL string
	natsProc          *launch.Proc  // the nats-server binary
	redis             *launch.Redis // the redis-server
	redisProc         *launch.Proc  // its process
	natsProfile       string        // host:port of nats-server's pprof listener, with -profile
	natsMonitor       string        // host:port of nats-server's monitoring listener

	nc  *nats.Conn    // the program's own NATS connection
	rdb *redis.Client // the program's own Redis client

	seq atomic.Int64 // for unique names

	mu    sync.Mutex
	procs []*proc
}

// newEnv builds (or finds) the binaries and starts NATS and Redis. On error
// everything started is stopped again.
func newEnv(ctx context.Context, o Options) (e *env, err error) {
	dir, err := os.MkdirTemp("", "kfbench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temporary directory: %w", err)
	}
	e = &env{opts: o, dir: dir}
	defer func() {
		if err != nil {
			e.close()
			e = nil
		}
	}()
	for _, d := range []string{"logs", "nats", "redis", "cfg", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	if err := e.binaries(ctx); err != nil {
		return nil, err
	}
	if err := e.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := e.startRedis(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// binaries finds nats-server, worker and producer in Options.BinDir, or
// builds them (without -race) into the temporary directory.
func (e *env) binaries(ctx context.Context) error {
	if d := e.opts.BinDir; d != "" {
		e.natsBin = filepath.Join(d, "nats-server")
		e.workerBin = filepath.Join(d, "worker")
		e.producerBin = filepath.Join(d, "producer")
		for _, b := range []string{e.natsBin, e.workerBin, e.producerBin} {
			if _, err := os.Stat(b); err != nil {
				return fmt.Errorf("bench: -bin %s: %w (make bench builds worker, producer and nats-server there)", d, err)
			}
		}
		return nil
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	bin := filepath.Join(e.dir, "bin")
	e.natsBin = filepath.Join(bin, "nats-server")
	e.workerBin = filepath.Join(bin, "worker")
	e.producerBin = filepath.Join(bin, "producer")
	e.progress("building nats-server, worker and producer (no -race) in %s", bin)
	if err := goBuild(ctx, root, "-o", e.natsBin, "github.com/nats-io/nats-server/v2"); err != nil {
		return err
	}
	return goBuild(ctx, root, "-ldflags", "-s -w", "-o", bin+"/", "./cmd/worker", "./cmd/producer")
}

// moduleRoot is the directory of the keyfleet module: the main module when
// kfbench runs from the repository's root, the replacement (../) when it
// runs inside the bench module (its tests run in bench/).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/keyfleet/keyfleet").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("bench: not inside the keyfleet repository (go list -m github.com/keyfleet/keyfleet: %v): run from the repository, or pass -bin DIR with worker, producer and nats-server built", err)
	}
	return dir, nil
}

func goBuild(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: go build %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (e *env) startNATS(ctx context.Context) error {
	n, err := launch.StartNATSProcess(ctx, launch.NATSProcessOptions{
		Bin: e.natsBin, StoreDir: filepath.Join(e.dir, "nats"), LogFile: filepath.Join(e.dir, "logs", "nats-server.log"),
		Monitor: true, Profile: e.opts.ProfileDir != "", OwnGroup: true,
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.natsProc, e.natsURL, e.natsMonitor, e.natsProfile = n.Proc, n.URL, n.Monitor, n.Profile
	if e.nc, err = nats.Connect(e.natsURL, nats.Name("kfbench"), nats.MaxReconnects(-1)); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return e.anchor(ctx)
}

// anchor creates a stream that lives as long as the server: after its
// last stream is deleted, nats-server removes the account's store
// directory in a goroutine, which can race with the next stream's creation
// ("could not create storage directory").
func (e *env) anchor(ctx context.Context) error {
	js, err := jetstreamOf(e.nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KFBENCH_ANCHOR", Subjects: []string{"kfbench.anchor"}}); err != nil {
		return fmt.Errorf("bench: anchor stream: %w", err)
	}
	return nil
}

func (e *env) startRedis(ctx context.Context) error {
	r, err := launch.StartRedis(ctx, launch.RedisOptions{
		Dir: filepath.Join(e.dir, "redis"), LogFile: filepath.Join(e.dir, "logs", "redis-server.log"), OwnGroup: true,
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.redis, e.redisProc, e.redisURL = r, r.Proc(), r.URL()
	e.rdb = redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 128})
	return nil
}

// close stops every process still running and removes the temporary
// directory. Safe on a partly built env.
func (e *env) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	// Workers and producers first, the servers last.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Kill()
	}
	if e.redis != nil {
		e.redis.Stop()
	}
	if e.natsProc != nil {
		e.natsProc.Kill()
	}
	if e.opts.KeepTemp {
		e.progress("kept %s", e.dir)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// uniq returns a fresh name suffix.
func (e *env) uniq(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, e.seq.Add(1))
}

// reset forgets a run's state: deletes the named streams and bucket and
// empties Redis (the program's own server; nothing else uses it).
func (e *env) reset(ctx context.Context, streams, buckets []string) error {
	js, err := jetstreamOf(e.nc)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range streams {
		if err := js.DeleteStream(ctx, s); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete stream %s: %w", s, err))
		}
	}
	for _, b := range buckets {
		if err := js.DeleteKeyValue(ctx, b); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete bucket %s: %w", b, err))
		}
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		errs = append(errs, fmt.Errorf("redis flushall: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: reset: %w", err)
	}
	return nil
}

// waitQuiet waits, at most Options.QuietWait, until the rest of the machine
// uses less than quietCores (sampled over 1 s while none of the
// benchmark's own processes but the idle servers run), and returns the
// last sample in cores.
func (e *env) waitQuiet(ctx context.Context) (float64, error) {
	const quietCores = 0.25
	deadline := time.Now().Add(e.opts.QuietWait)
	said := false
	for {
		busy0, ours0 := machineBusy(), e.serversCPU()+selfCPU()
		t0 := time.Now()
		if err := ctxsleep.Sleep(ctx, time.Second); err != nil {
			return 0, err
		}
		others := max(0, (machineBusy()-busy0)-(e.serversCPU()+selfCPU()-ours0)) / time.Since(t0).Seconds()
		if others < quietCores || !time.Now().Before(deadline) {
			return others, nil
		}
		if !said {
			e.progress("other processes use %.2f cores: waiting up to %s for a quieter machine", others, time.Until(deadline).Round(time.Second))
			said = true
		}
	}
}

func (e *env) serversCPU() float64 {
	n, _ := cpuOf(e.natsProc)
	r, _ := cpuOf(e.redisProc)
	return n + r
}

func (e *env) progress(format string, args ...any) {
	if e.opts.Progress != nil {
		fmt.Fprintf(e.opts.Progress, "kfbench: "+format+"\n", args...)
	}
}
