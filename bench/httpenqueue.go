package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Scenario 16: enqueue over HTTP and the memory of an enqueue (issue 26).
//
//   - HTTP: 100,000 items (10,000 with -quick), the file of scenario 2,
//     POSTed to /api/batches of a `producer dashboard` process (the admin
//     token, Content-Type application/x-ndjson, the file streamed with its
//     Content-Length), timed from the request to the answer; against
//     `producer enqueue` of the same file into a batch of its own
//     (subprocess, exec → exit). Each variant stores every item as new.
//   - Memory: `producer enqueue --dry-run` of 10,000,000 items (1,000,000
//     with -quick): its peak RSS (rusage ru_maxrss) divided by the items;
//     beside it, what the items add: the peak less that of a dry run of
//     one item (the binary, the runtime and the buffers), divided by the
//     items.
var httpEnqueueScenario = &scenario{
	name:  "httpenqueue",
	title: "16. enqueue over HTTP; enqueue memory",
	figures: []figSpec{
		{id: "ratio", name: "POST /api/batches ÷ producer enqueue, items/s (100,000 items)", unit: "×", goal: atLeast(0.8)},
		{id: "http_per_s", name: "POST /api/batches to producer dashboard, request → answer", unit: "items/s"},
		{id: "cli_per_s", name: "producer enqueue of the same file (subprocess, exec → exit)", unit: "items/s"},
		{id: "rss_per_item", name: "producer enqueue --dry-run of 10,000,000 items: peak RSS per item", unit: "B", goal: atMost(24)},
		{id: "rss_added_per_item", name: "the same, less the peak RSS of a dry run of 1 item, per item", unit: "B"},
		{id: "rss_peak", name: "peak RSS of that dry run", unit: "MB"},
	},
	run: runHTTPEnqueue,
}

const benchTokenEnv = "KFBENCH_ADMIN_TOKEN"

func runHTTPEnqueue(ctx context.Context, e *env, r runInfo) (*sample, error) {
	n := pick(r.quick, 100_000, 10_000)
	file, err := e.itemsFile(n)
	if err != nil {
		return nil, err
	}
	smp := newSample()
	f, cfg, err := producerFleet(ctx, e)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)

	// producer enqueue.
	smp.values["cli_per_s"], err = subprocessEnqueue(ctx, e, f.tag+"-producer", cfg, f.batch+"-cli", file, n,
		fmt.Sprintf("(%d new, 0 duplicates)", n), "keyfleet: producer enqueue (subprocess)", smp)
	if err != nil {
		return nil, err
	}

	// POST /api/batches to a dashboard on the same fleet.
	if err := postBatch(ctx, e, f, cfg, file, n, smp); err != nil {
		return nil, err
	}
	smp.values["ratio"] = smp.values["http_per_s"] / smp.values["cli_per_s"]

	// Peak RSS of dry runs.
	big := pick(r.quick, 10_000_000, 1_000_000)
	bigFile, err := e.itemsFile(big)
	if err != nil {
		return nil, err
	}
	one, err := e.itemsFile(1)
	if err != nil {
		return nil, err
	}
	base, err := dryRunPeakKB(ctx, e, one)
	if err != nil {
		return nil, err
	}
	peak, err := dryRunPeakKB(ctx, e, bigFile)
	if err != nil {
		return nil, err
	}
	smp.values["rss_per_item"] = peak * 1024 / float64(big)
	smp.values["rss_added_per_item"] = (peak - base) * 1024 / float64(big)
	smp.values["rss_peak"] = peak / 1024
	return smp, nil
}

// postBatch starts `producer dashboard` with an admin token on cfg's fleet
// and POSTs file (n items) to its /api/batches.
func postBatch(ctx context.Context, e *env, f *fleet, cfg, file string, n int, smp *sample) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	dash, err := e.start(f.tag+"-dashboard", e.producerBin,
		[]string{"dashboard", "--config", cfg, "--listen", addr, "--admin-token-env", benchTokenEnv}, []string{benchTokenEnv + "=" + token})
	if err != nil {
		return err
	}
	defer func() { _ = dash.Stop(ctx, 5*time.Second) }()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) || dash.Exited() {
			return fmt.Errorf("bench: the dashboard did not answer /healthz within 30s:\n%s", dash.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	body, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer body.Close()
	st, err := body.Stat()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/batches?kind=sleep&batch="+f.batch+"-http", body)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.ContentLength = st.Size()
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+token)

	cpu0, err := dash.cpu()
	if err != nil {
		return err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: POST /api/batches: %w", err)
	}
	var rep struct {
		Items, New int
		Error      string
	}
	err = json.NewDecoder(resp.Body).Decode(&rep)
	_ = resp.Body.Close()
	d := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK || rep.Items != n || rep.New != n {
		return fmt.Errorf("bench: POST /api/batches: %d %+v %v (want %d new items)", resp.StatusCode, rep, err, n)
	}
	cpu1, err := dash.cpu()
	if err != nil {
		return err
	}
	use, err := m.done(ctx, "keyfleet: POST /api/batches (producer dashboard)", n, d, map[string]float64{"producer": cpu1 - cpu0})
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values["http_per_s"] = float64(n) / d.Seconds()
	return nil
}

// dryRunPeakKB runs `producer enqueue --dry-run` of file (its listing
// discarded) and returns its peak RSS in kB: its VmHWM, read every 5 ms
// until it exits (the child's ru_maxrss would not do: Go starts children
// with a vfork, and Linux counts the parent's RSS at the exec in the
// child's maximum).
func dryRunPeakKB(ctx context.Context, e *env, file string) (float64, error) {
	var errb launch.Buffer
	p, err := launch.Start("kfbench-dry-run", e.producerBin, []string{"enqueue", "--dry-run", "--kind", "sleep", file},
		launch.Options{Stderr: &errb, OwnGroup: true})
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	peak := 0.0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !p.Exited() {
		if hwm, err := statusKB(p.Pid(), "VmHWM"); err == nil {
			peak = max(peak, hwm)
		}
		select {
		case <-p.Done():
		case <-tick.C:
		case <-ctx.Done():
			p.Kill()
			return 0, context.Cause(ctx)
		}
	}
	if err := p.Wait(ctx, time.Minute); err != nil {
		return 0, fmt.Errorf("producer enqueue --dry-run %s: %w\n%s", file, err, errb.String())
	}
	if peak == 0 {
		return 0, fmt.Errorf("bench: no VmHWM of producer enqueue --dry-run %s", file)
	}
	return peak, nil
}
