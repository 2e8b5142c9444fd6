package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/cli"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Scenario 2: enqueue N items from a JSON Lines file, each with an ID (so
// each message carries a dedupe ID, <batch>/<id>).
//
//   - subprocess: `producer enqueue` timed from exec to exit (start-up,
//     validation pass, hashing, publishing, every publish confirmed);
//   - in process: the same command through cli.ProducerMain (what
//     BenchmarkEnqueue100k runs), without process start-up;
//   - repeat: the same file again into the same stream: every item is
//     dropped by the server as a duplicate;
//   - ceiling: the same messages (subject, headers, Nats-Msg-Id, payload)
//     published asynchronously with the same window of 4096, raw
//     jetstream, timed from the first publish to the last confirmation.
var enqueueScenario = &scenario{
	name:  "enqueue",
	title: "2. enqueue",
	figures: []figSpec{
		{id: "subprocess", name: "producer enqueue (subprocess, exec → exit)", unit: "items/s", goal: atLeast(50000), ceiling: "raw_publish"},
		{id: "in_process", name: "producer enqueue in process (cli.ProducerMain)", unit: "items/s", goal: atLeast(50000), ceiling: "raw_publish"},
		{id: "repeat", name: "repeat of the same file: all duplicates (subprocess)", unit: "items/s", ceiling: "raw_publish"},
		{id: "raw_publish", name: "ceiling: raw JetStream async publish, same messages, window 4096", unit: "msgs/s"},
	},
	run: runEnqueue,
}

func runEnqueue(ctx context.Context, e *env, r runInfo) (*sample, error) {
	n := pick(r.quick, 100000, 10000)
	file, err := e.itemsFile(n)
	if err != nil {
		return nil, err
	}
	smp := newSample()

	// Subprocess, then the repeat into the same stream.
	f, cfg, err := producerFleet(ctx, e)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	for _, c := range []struct {
		key, want, variant string
	}{
		{"subprocess", fmt.Sprintf("(%d new, 0 duplicates)", n), "keyfleet: producer enqueue (subprocess)"},
		{"repeat", fmt.Sprintf("(0 new, %d duplicates", n), "keyfleet: producer enqueue, repeat (all duplicates)"},
	} {
		perS, err := subprocessEnqueue(ctx, e, f.tag+"-producer-"+c.key, cfg, f.batch, file, n, c.want, c.variant, smp)
		if err != nil {
			return nil, err
		}
		smp.values[c.key] = perS
	}

	// In process.
	f2, cfg2, err := producerFleet(ctx, e)
	if err != nil {
		return nil, err
	}
	defer f2.close(ctx)
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	start := time.Now()
	code := cli.ProducerMain([]string{"enqueue", "--config", cfg2, "--kind", "sleep", "--batch", f2.batch, file}, strings.NewReader(""), &out, &errb)
	d := time.Since(start)
	if want := fmt.Sprintf("(%d new, 0 duplicates)", n); code != 0 || !strings.Contains(out.String(), want) {
		return nil, fmt.Errorf("in-process enqueue: exit %d, want %q: %s %s", code, want, out.String(), errb.String())
	}
	use, err := m.done(ctx, "keyfleet: producer enqueue (in process)", n, d, nil)
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values["in_process"] = float64(n) / d.Seconds()

	// Ceiling.
	if err := rawPublish(ctx, e, smp, n); err != nil {
		return nil, err
	}
	return smp, nil
}

// itemsFile writes (once) a JSON Lines file of n small items with IDs.
func (e *env) itemsFile(n int) (string, error) {
	path := filepath.Join(e.dir, "data", fmt.Sprintf("items-%d.jsonl", n))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	out, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	w := bufio.NewWriter(out)
	for i := range n {
		fmt.Fprintf(w, "{\"id\":\"item-%06d\",\"ms\":0,\"text\":\"hello\"}\n", i)
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return "", fmt.Errorf("bench: %w", err)
	}
	return path, out.Close()
}

// rawPublish publishes n messages as the producer would, without it.
func rawPublish(ctx context.Context, e *env, smp *sample, n int) error {
	f, err := e.newFleet(ctx, "raw", fleetSpec{creds: []credSpec{{id: "k0", max: 1}}, concurrency: 1})
	if err != nil {
		return err
	}
	defer f.close(ctx)
	nc, err := nats.Connect(e.natsURL, nats.Name("kfbench-publisher"))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer nc.Close()
	const window = queue.DefaultWindow
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		// As the producer publishes an item: its batch's subject and
		// headers, with the duplicate-window ID.
		id := fmt.Sprintf("item-%06d", i)
		msgs[i] = f.q.Message(kftype.Item{ID: id, Batch: f.batch, Kind: "sleep",
			Payload: fmt.Appendf(nil, "{\"id\":%q,\"ms\":0,\"text\":\"hello\"}", id)})
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, msg := range msgs {
		// A full window waits for confirmations, as the producer's does
		// (the library's own stall wait, 200 ms, fails a publish on a
		// machine where a confirmation takes longer).
		if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("bench: publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("bench: raw publish: %d confirmations missing after 5m", js.PublishAsyncPending())
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	d := time.Since(start)
	info, err := f.q.JetStream().Stream(ctx, f.stream)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(n) {
		if fresh, err := info.Info(ctx); err != nil || fresh.State.Msgs != uint64(n) {
			return fmt.Errorf("bench: raw publish stored %d of %d messages", got, n)
		}
	}
	use, err := m.done(ctx, "ceiling: raw JetStream async publish", n, d, nil)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values["raw_publish"] = float64(n) / d.Seconds()
	return nil
}

// subprocessEnqueue runs `producer enqueue` of the n items of file into
// batch as the process name, timed from exec to exit; its output must say
// want. Its CPU use goes into smp under variant; it returns the items/s.
func subprocessEnqueue(ctx context.Context, e *env, name, cfg, batch, file string, n int, want, variant string, smp *sample) (float64, error) {
	m, err := e.meter(ctx)
	if err != nil {
		return 0, err
	}
	p, err := e.start(name, e.producerBin, []string{"enqueue", "--config", cfg, "--kind", "sleep", "--batch", batch, file}, nil)
	if err != nil {
		return 0, err
	}
	if err := p.Wait(ctx, 10*time.Minute); err != nil {
		return 0, fmt.Errorf("producer enqueue: %w\n%s", err, p.logTail())
	}
	d := time.Since(p.Started())
	if !strings.Contains(p.logTail(), want) {
		return 0, fmt.Errorf("producer enqueue: output lacks %q:\n%s", want, p.logTail())
	}
	cpu, err := p.cpu()
	if err != nil {
		return 0, err
	}
	use, err := m.done(ctx, variant, n, d, map[string]float64{"producer": cpu})
	if err != nil {
		return 0, err
	}
	smp.cpu = append(smp.cpu, use)
	return float64(n) / d.Seconds(), nil
}

// producerFleet is a fleet of its own streams for a producer run, with the
// producer's config file.
func producerFleet(ctx context.Context, e *env) (*fleet, string, error) {
	f, err := e.newFleet(ctx, "enq", fleetSpec{creds: []credSpec{{id: "k0", max: 1}}, concurrency: 1})
	if err != nil {
		return nil, "", err
	}
	cfg, err := f.writeConfig("producer", 0)
	if err != nil {
		f.close(ctx)
		return nil, "", err
	}
	return f, cfg, nil
}
