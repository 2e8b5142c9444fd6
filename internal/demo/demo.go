package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

type demo struct {
	bin     string
	items   int
	workers int
	keep    bool
	out     io.Writer

	dashboard string // the dashboard's listen address ("" none)
	hold      bool   // keep everything running at the end until Ctrl-C

	dir      string
	cfg      string
	env      []string
	mu       sync.Mutex
	cleanups []func()
}

func (d *demo) onCleanup(f func()) {
	d.mu.Lock()
	d.cleanups = append(d.cleanups, f)
	d.mu.Unlock()
}

// cleanup stops everything the demo started, newest first.
func (d *demo) cleanup() {
	d.mu.Lock()
	fs := d.cleanups
	d.cleanups = nil
	d.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	if d.dir != "" && !d.keep {
		os.RemoveAll(d.dir)
	}
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) step(n int, title string) {
	d.say("\n\033[1m== %d. %s\033[0m", n, title)
}

func (d *demo) run(ctx context.Context) int {
	for _, b := range []string{"producer", "worker"} {
		if _, err := os.Stat(filepath.Join(d.bin, b)); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %s not found in %s: run `make build` first (make demo does)\n", b, d.bin)
			return 2
		}
	}
	var err error
	if d.dir, err = os.MkdirTemp("", "keyfleet-demo-"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	if err := d.runSteps(ctx); err != nil {
		if ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
		return 1
	}
	return 0
}

func (d *demo) runSteps(ctx context.Context) error {
	start := time.Now()
	d.say("keyfleet demo: %d items through %d workers sharing %d API keys, then two more kinds of work on their own keys (work dir %s)",
		d.items, d.workers, len(demoKeys), d.dir)

	natsURL, err := d.startNATS()
	if err != nil {
		return err
	}
	redisURL, err := d.startRedis(ctx)
	if err != nil {
		return err
	}
	apiURL, api, err := d.startAPI()
	if err != nil {
		return err
	}
	openaiURL, openai, err := d.startOpenAI()
	if err != nil {
		return err
	}
	d.say("  NATS (JetStream) %s · Redis %s · stand-in API %s · strict stand-in of OpenAI's API %s", natsURL, redisURL, apiURL, openaiURL)
	if err := d.writeConfig(natsURL, redisURL, apiURL, openaiURL); err != nil {
		return err
	}
	itemsFile, err := d.writeItems()
	if err != nil {
		return err
	}
	for i := 1; i <= d.workers; i++ {
		if err := d.startWorker(fmt.Sprintf("demo-worker-%d", i)); err != nil {
			return err
		}
	}
	dashURL := ""
	if d.dashboard != "" {
		if dashURL, err = d.startDashboard(d.dashboard); err != nil {
			return err
		}
		d.say("  Dashboard: \033[1m%s\033[0m (live: batches, keys, workers, dead letters; open it now)", dashURL)
	}

	d.step(1, "The pool: five keys, each limited its own way (the pool knows some limits; the API's own signals tell the rest)")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tPOOL LIMITS\tTHE API REALLY ALLOWS\t")
	for _, k := range demoKeys {
		pool := fmt.Sprintf("%d at once", k.poolConcurrency)
		if k.poolLimits != "" {
			pool += ", " + k.poolLimits
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t(%s)\n", k.id, pool, k.apiSays, k.note)
	}
	tw.Flush()

	d.step(2, fmt.Sprintf("Enqueue %d items (validated first; message IDs make a repeat harmless)", d.items))
	if err := d.producer(ctx, "enqueue", "--kind", "enrich", itemsFile); err != nil {
		return err
	}

	d.step(3, "Mid-run: the fleet and the pool (limits in use, keys resting and why, a learnt pace, a disabled key)")
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		return err
	}
	if err := d.producer(ctx, "status"); err != nil {
		return err
	}

	d.step(4, "Enqueue the same file again with --wait: nothing is added; follow the batch to the end")
	if err := d.producer(ctx, "enqueue", "--kind", "enrich", "--wait", itemsFile); err != nil {
		return err
	}

	d.step(5, "The pool afterwards")
	if err := d.producer(ctx, "creds", "list"); err != nil {
		return err
	}

	d.step(6, "What the stand-in API saw")
	d.apiTable(api.Stats())

	d.step(7, "Results come back as JSON Lines (first 2 of the batch)")
	if err := d.showResults(ctx, itemsFile); err != nil {
		return err
	}

	if err := d.kinds(ctx, openai); err != nil {
		return err
	}

	leaks := d.secretsInLogs()
	d.say("\n  Secrets in the workers' logs: %d (keys are resolved inside the worker; Redis and NATS only see IDs)", leaks)
	d.say("\nDone in %s.", time.Since(start).Round(100*time.Millisecond))
	d.say("To run it against your own API: copy config/demo.yaml, set jobs.http.url and your keys (secret_env),")
	d.say("then start workers anywhere with `bin/worker --config kf.yaml` and run `bin/producer enqueue --config kf.yaml --wait items.jsonl`.")
	d.say("OpenAI, Anthropic or an OpenAI-compatible server: docs/providers.md, from a batch file to results in three commands.")
	if leaks > 0 {
		return fmt.Errorf("%d secrets found in the logs", leaks)
	}
	if d.hold {
		where := ""
		if dashURL != "" {
			where = " The dashboard stays at " + dashURL + "."
		}
		d.say("\nHolding: NATS, Redis, the API, the workers are still running.%s Ctrl-C stops everything.", where)
		<-ctx.Done()
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (d *demo) writeConfig(natsURL, redisURL, apiURL, openaiURL string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "nats: {url: %q}\nredis: {url: %q}\n", natsURL, redisURL)
	b.WriteString("pool:\n  name: keyfleet-demo\n  lease_ttl: 10s\n  cooldown: 5s\n  cost: {field: cost, default: 1}\n")
	b.WriteString("  scope: {field: model}\n  credentials:\n")
	for _, k := range allKeys() {
		fmt.Fprintf(&b, "    - {id: %s, secret_env: %s, groups: [%s], max_concurrent: %d", k.id, k.env, k.group, k.poolConcurrency)
		if k.poolLimits != "" {
			fmt.Fprintf(&b, ", limits: %s", k.poolLimits)
		}
		b.WriteString("}\n")
		d.env = append(d.env, k.env+"="+k.secret)
	}
	b.WriteString("worker:\n  concurrency: 4\n  shutdown_grace: 5s\n  max_attempts: 3\n  retry_backoff: [500ms, 1s]\n")
	b.WriteString("queue:\n  stream: KEYFLEET_DEMO\n  subject_prefix: keyfleet.demo\n  consumer: demo-workers\n  storage: memory\n")
	// Three kinds, each on its own key group; every worker serves them all.
	// chat and embed speak OpenAI's own API (provider: openai), here its
	// strict stand-in's.
	b.WriteString("jobs:\n  kinds:\n")
	fmt.Fprintf(&b, "    enrich: {http: {url: %q, timeout: 10s, cost_from: usage.total_tokens}, credentials: [enrich]}\n", apiURL+"/v1/enrich")
	fmt.Fprintf(&b, "    chat: {http: {provider: openai, url: %q, timeout: 10s}, credentials: [llm]}\n", openaiURL)
	fmt.Fprintf(&b, "    embed: {http: {provider: openai, url: %q, endpoint: /v1/embeddings, timeout: 10s}, credentials: [emb]}\n", openaiURL)
	b.WriteString("log: {level: info, format: json}\n")
	d.cfg = filepath.Join(d.dir, "keyfleet.yaml")
	return os.WriteFile(d.cfg, []byte(b.String()), 0o600)
}

func (d *demo) writeItems() (string, error) {
	p := filepath.Join(d.dir, "items.jsonl")
	var b strings.Builder
	for i := 1; i <= d.items; i++ {
		// An estimated cost in tokens, and (for the stand-in API) what the
		// request really uses: the reply's usage.total_tokens.
		cost := 40 + (i*37)%80
		fmt.Fprintf(&b, `{"id":"doc-%04d","text":"enrich document %d","cost":%d,"actual_tokens":%d}`+"\n", i, i, cost, cost*3/4)
	}
	return p, os.WriteFile(p, []byte(b.String()), 0o600)
}

func (d *demo) startWorker(id string) error {
	logf, err := os.Create(filepath.Join(d.dir, id+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	// Its own process group: Ctrl-C in the terminal reaches the demo, which
	// then stops the workers gracefully.
	p, err := launch.Start(id, filepath.Join(d.bin, "worker"), []string{"--config", d.cfg, "--id", id}, launch.Options{
		Env: append(os.Environ(), d.env...), Stdout: logf, Stderr: logf, OwnGroup: true,
	})
	if err != nil {
		return err
	}
	d.onCleanup(func() { _ = p.Stop(context.Background(), 15*time.Second) })
	return nil
}

// producer runs bin/producer with the demo's config, attached to the
// terminal (so that --wait shows its progress bar there).
func (d *demo) producer(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "producer"), append(args, "--config", d.cfg)...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = d.out, os.Stderr, os.Stdin
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && args[0] == "enqueue" {
		return nil // some items failed: the summary says so
	}
	if err != nil {
		return fmt.Errorf("producer %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (d *demo) showResults(ctx context.Context, itemsFile string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(d.bin, "producer"), "enqueue", "--kind", "enrich", "--dry-run", "--config", d.cfg, itemsFile).Output()
	if err != nil {
		return fmt.Errorf("producer enqueue --dry-run: %w", err)
	}
	batch := ""
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "batch "); i >= 0 {
			f := strings.Fields(line[i+len("batch "):])
			if len(f) > 0 {
				batch = strings.Trim(f[0], `"',:()`)
				break
			}
		}
	}
	if batch == "" {
		return fmt.Errorf("could not find the batch ID in the dry run's output:\n%s", out)
	}
	res, err := exec.CommandContext(ctx, filepath.Join(d.bin, "producer"), "results", "--batch", batch, "--config", d.cfg).Output()
	if err != nil {
		return fmt.Errorf("producer results: %w", err)
	}
	lines := strings.SplitN(string(res), "\n", 3)
	for _, l := range lines[:min(2, len(lines))] {
		d.say("  %s", l)
	}
	d.say("  … `producer results --batch %s -o results.jsonl` writes all %d", batch, strings.Count(string(res), "\n"))
	return nil
}

func (d *demo) apiTable(st fakeapi.Stats) {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tREQUESTS\t200 OK\t429 RATE LIMITED\tTOKENS USED\tADMITTED OVER ITS LIMITS\t")
	i := 0
	for _, k := range demoKeys {
		if k.revoked {
			continue
		}
		s := st.Keys[i]
		i++
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t\n", k.id, s.Requests, s.OK, s.RateLimited, s.Tokens, s.OverLimit)
	}
	fmt.Fprintf(tw, "  (unknown keys)\t%d\t\t\t\t\t\n", st.Unauthorized)
	tw.Flush()
}

// secretsInLogs counts demo secrets in the workers' logs (there must be
// none).
func (d *demo) secretsInLogs() int {
	n := 0
	logs, _ := filepath.Glob(filepath.Join(d.dir, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		for _, k := range allKeys() {
			n += strings.Count(string(b), k.secret)
		}
	}
	return n
}
