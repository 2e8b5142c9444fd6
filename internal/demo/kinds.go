package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// The demo's second part: an OpenAI Batch API input file of chat requests
// (two models, each limited per key) on the chat kind, and JSON Lines of
// embeddings requests on the embed kind, both provider: openai, on their
// own key groups, served by the same workers, against a strict stand-in
// of OpenAI's API. Requests of the slow model go first and wait for their
// limit; those of the fast model and the embeddings are not held back by
// them. The chat batch's results come back in OpenAI's batch output
// format.
const (
	slowItems  = 24 // 2 llm keys × 2/s: some 6 s
	fastItems  = 60 // 2 × 10/s: some 3 s
	embedItems = 40 // 20/s: some 2 s
)

func (d *demo) kinds(ctx context.Context, api *fakeapi.Server) error {
	d.step(8, "OpenAI's own formats: a Batch API input file on the chat kind (llm keys, limited per model), embeddings on the emb key")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tGROUP\tPOOL LIMITS (scope: the item's model)\tTHE API ALLOWS\t")
	for _, k := range kindKeys {
		fmt.Fprintf(tw, "  %s\t%s\t%d at once, %s\t%s\t(%s)\n", k.id, k.group, k.poolConcurrency, k.poolLimits, k.apiSays, k.note)
	}
	tw.Flush()
	chat, embed, err := d.writeKindItems()
	if err != nil {
		return err
	}
	d.say("  Enqueue an OpenAI batch file of %d chat requests, the %d of %s first, then %d of %s; and %d embeddings requests:",
		slowItems+fastItems, slowItems, slowModel, fastItems, fastModel, embedItems)
	start := time.Now()
	if err := d.producer(ctx, "enqueue", "--kind", "chat", "--format", "openai-batch", "--batch", "chat", chat); err != nil {
		return err
	}
	if err := d.producer(ctx, "enqueue", "--kind", "embed", "--batch", "embed", embed); err != nil {
		return err
	}
	if err := sleepCtx(ctx, 1500*time.Millisecond); err != nil {
		return err
	}
	d.say("\n  The pool mid-run (groups; each limit with its scope and its use):")
	if err := d.producer(ctx, "creds", "list"); err != nil {
		return err
	}
	d.say("\n  Follow the chat batch to the end (the embed batch is done by now):")
	if err := d.producer(ctx, "enqueue", "--kind", "chat", "--format", "openai-batch", "--batch", "chat", "--wait", chat); err != nil {
		return err
	}
	d.say("\n  When each finished (its last item, from the enqueue):")
	for _, g := range []struct{ batch, prefix, what string }{
		{"embed", "emb-", "embed items (emb key)"},
		{"chat", "mini-", fastModel + " items (llm keys)"},
		{"chat", "4o-", slowModel + " items (llm keys, enqueued first)"},
	} {
		n, last, err := d.lastFinished(ctx, g.batch, g.prefix)
		if err != nil {
			return err
		}
		d.say("  %-40s %3d done, the last %4.1f s after the enqueue", g.what, n, last.Sub(start).Seconds())
	}
	d.say("  The %s items waited for their own limit only: the other model and the other kind ran at theirs.", slowModel)
	d.kindsAPITable(api.Stats())

	d.say("\n  The chat batch's results in OpenAI's batch output format (first 2; `producer results --batch chat --format openai-batch`):")
	out, err := exec.CommandContext(ctx, filepath.Join(d.bin, "producer"), "results", "--batch", "chat", "--format", "openai-batch", "--config", d.cfg).Output()
	if err != nil {
		return fmt.Errorf("producer results --format openai-batch: %w", err)
	}
	lines := strings.SplitN(string(out), "\n", 3)
	for _, l := range lines[:min(2, len(lines))] {
		d.say("  %s", l)
	}
	return nil
}

// writeKindItems writes the chat items (the slow model's first) and the
// embed items.
func (d *demo) writeKindItems() (chat, embed string, err error) {
	var c, e strings.Builder
	// An OpenAI Batch API input file, as it would be uploaded.
	line := `{"custom_id": "%s-%03d", "method": "POST", "url": "/v1/chat/completions", "body": {"model": %q, ` +
		`"messages": [{"role": "user", "content": "%s document %d"}], "max_completion_tokens": 20}}` + "\n"
	for i := 1; i <= slowItems; i++ {
		fmt.Fprintf(&c, line, "4o", i, slowModel, "summarise", i)
	}
	for i := 1; i <= fastItems; i++ {
		fmt.Fprintf(&c, line, "mini", i, fastModel, "classify", i)
	}
	// Embeddings requests as JSON Lines: the request is the line without
	// its id.
	for i := 1; i <= embedItems; i++ {
		fmt.Fprintf(&e, `{"id":"emb-%03d","model":"text-embedding-3-small","input":"document %d"}`+"\n", i, i)
	}
	chat, embed = filepath.Join(d.dir, "chat.jsonl"), filepath.Join(d.dir, "embed.jsonl")
	if err := os.WriteFile(chat, []byte(c.String()), 0o600); err != nil {
		return "", "", err
	}
	return chat, embed, os.WriteFile(embed, []byte(e.String()), 0o600)
}

// lastFinished reads batch's results and returns how many of the items
// whose ID starts with prefix succeeded, and when the last one finished.
func (d *demo) lastFinished(ctx context.Context, batch, prefix string) (int, time.Time, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(d.bin, "producer"), "results", "--batch", batch, "--config", d.cfg).Output()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("producer results --batch %s: %w", batch, err)
	}
	var n int
	var last time.Time
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Item       string    `json:"item"`
			Outcome    string    `json:"outcome"`
			FinishedAt time.Time `json:"finished_at"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 0, time.Time{}, fmt.Errorf("producer results --batch %s: %w", batch, err)
		}
		if strings.HasPrefix(r.Item, prefix) && r.Outcome == "succeeded" {
			n++
			if r.FinishedAt.After(last) {
				last = r.FinishedAt
			}
		}
	}
	return n, last, sc.Err()
}

// kindsAPITable shows what the stand-in API saw of the kinds' keys, per
// model where the key limits models.
func (d *demo) kindsAPITable(st fakeapi.Stats) {
	d.say("\n  What the stand-in API saw of these keys:")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tMODEL\tREQUESTS\t200 OK\t429 RATE LIMITED\tADMITTED OVER ITS LIMITS\t")
	for i, k := range kindKeys {
		s := st.Keys[i]
		if len(s.Models) == 0 {
			fmt.Fprintf(tw, "  %s\t\t%d\t%d\t%d\t%d\t\n", k.id, s.Requests, s.OK, s.RateLimited, s.OverLimit)
			continue
		}
		for _, m := range []string{slowModel, fastModel} {
			ms := s.Models[m]
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%d\t\n", k.id, m, ms.Requests, ms.OK, ms.RateLimited, ms.OverLimit)
		}
	}
	tw.Flush()
}
