package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// cliScript runs a named kind's items: "bad" ones fail for good (exit 65),
// "slow" ones take a minute, the others print "done <id>".
const cliScript = `case "$KEYFLEET_ITEM_ID" in
  *bad*) echo "bad item $KEYFLEET_ITEM_ID" >&2; exit 65;;
  *slow*) sleep 60;;
esac
echo "done $KEYFLEET_ITEM_ID"
`

// The operator's commands through the binaries on one fleet whose config
// defines one kind, a named one:
//   - enqueue without --kind takes it; --json --wait prints one object, as
//     the HTTP enqueue answers, with the wait's summary;
//   - item show finds an item that succeeded (key, output) and one that was
//     dead-lettered (reason, attempts, error);
//   - a config defining several kinds makes enqueue without --kind exit 2
//     naming them, nothing enqueued;
//   - a lane's consumer names its batch in its description and metadata
//     (what `nats consumer ls` shows);
//   - dlq replay of every batch, batch cancel and creds remove ask under a
//     pseudo-terminal (no: nothing changes, exit 1; yes or --yes: done), and
//     act without one.
func TestCLIFleetCommands(t *testing.T) {
	f := newFleet(t, fleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 4}`,
		Worker:      "concurrency: 4",
		Jobs: `kinds:
  resize:
    exec: {command: ["{{dir}}/resize.sh"], timeout: 2m}`,
		Env: []string{"KEY_A=sk-cli-a"},
	})
	f.writeScript("resize.sh", cliScript)
	f.startWorker("w1")

	// enqueue --json --wait, without --kind.
	path := f.writeInput("docs.jsonl", `{"id":"ok-1"}`+"\n"+`{"id":"ok-2"}`+"\n"+`{"id":"bad-1"}`+"\n")
	r := f.producer(nil, "enqueue", "--json", "--wait", "--batch", "docs", path)
	var enq struct {
		Batch      string `json:"batch"`
		Items      int    `json:"items"`
		New        int    `json:"new"`
		Duplicates int    `json:"duplicates"`
		Kind       string `json:"kind"`
		Wait       *struct {
			Total, Succeeded, Failed, Cancelled int
			Failures                            []struct{ Item, Error string }
		} `json:"wait"`
	}
	oneJSON(t, "enqueue --json --wait", r.stdout, &enq)
	if r.code != 1 || enq.Batch != "docs" || enq.Items != 3 || enq.New != 3 || enq.Kind != "resize" || enq.Wait == nil ||
		enq.Wait.Total != 3 || enq.Wait.Succeeded != 2 || enq.Wait.Failed != 1 || len(enq.Wait.Failures) != 1 ||
		enq.Wait.Failures[0].Item != "bad-1" || !strings.Contains(r.stderr, "1 of 3 items failed") {
		t.Fatalf("enqueue --json --wait of kind resize (the only one): want exit 1 and one object:\n%s", r)
	}

	// item show.
	var it itemview.Item
	r = f.producer(nil, "item", "show", "docs", "bad-1", "--json")
	oneJSON(t, "item show --json", r.stdout, &it)
	if r.code != 0 || it.State != itemview.StateDeadLettered || it.Reason != queue.ReasonPermanent || it.Attempts != 1 ||
		it.CredentialID != "key-a" || !strings.Contains(it.Error, "bad item bad-1") || it.Kind != "resize" {
		t.Fatalf("item show of a dead-lettered item:\n%s", r)
	}
	r = f.producer(nil, "item", "show", "docs", "ok-2")
	if r.code != 0 || !strings.Contains(r.stdout, "Item ok-2 of batch docs: succeeded") || !strings.Contains(r.stdout, "key-a") ||
		!strings.Contains(r.stdout, "done ok-2") {
		t.Fatalf("item show of a succeeded item:\n%s", r)
	}
	if r = f.producer(nil, "item", "show", "docs", "nope"); r.code != 2 || !strings.Contains(r.stderr, "no item nope in batch docs") {
		t.Fatalf("item show of an unknown item: want exit 2 naming it:\n%s", r)
	}

	// Several kinds: --kind is required, nothing is enqueued.
	two := f.writeInput("two.yaml", strings.Replace(mustRead(t, f.cfg), "jobs:\n", "jobs:\n  exec: {command: [\"/bin/cat\"]}\n", 1))
	before := f.queueStats().Stream.Messages
	r = runProducer(t, f.env, nil, "enqueue", "--config", two, "--batch", "more", f.writeInput("more.jsonl", `{"id":"m"}`+"\n"))
	if r.code != 2 || !strings.Contains(r.stderr, "defines several job kinds: exec, resize; give one of them with --kind") ||
		f.queueStats().Stream.Messages != before {
		t.Fatalf("enqueue without --kind, two kinds defined: want exit 2 naming them, nothing enqueued:\n%s", r)
	}

	// A lane's consumer names its batch.
	r = f.producer(nil, "enqueue", "--batch", "slow batch", f.writeInput("slow.jsonl", `{"id":"slow-1"}`+"\n"+`{"id":"slow-2"}`+"\n"+`{"id":"slow-3"}`+"\n"))
	if r.code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := f.q.JetStream()
	testutil.WaitFor(t, "the slow batch's lane consumer", 30*time.Second, func() bool {
		_, err := js.Consumer(ctx, "KF", f.q.LaneConsumerName("slow batch"))
		return err == nil
	})
	stream, err := js.Stream(ctx, "KF")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for ci := range stream.ListConsumers(ctx).Info() {
		if ci.Name != f.q.LaneConsumerName("slow batch") {
			continue
		}
		found = true
		if ci.Config.Description != "keyfleet batch slow batch" || ci.Config.Metadata[queue.MetaBatch] != "slow batch" {
			t.Errorf("the lane consumer of batch %q: description %q, metadata %q", "slow batch", ci.Config.Description, ci.Config.Metadata)
		}
	}
	if !found {
		t.Error("the slow batch's lane consumer is not listed")
	}

	// Confirmations, under a pseudo-terminal and without.
	term := newPseudoTerminal(t)
	producer := func(args ...string) ran {
		return cliRun{bin: "producer", args: append(args, "--config", f.cfg), env: f.env, stdin: term.tty}.run(t)
	}
	dlqCount := func() int { return len(parseJSONArray(t, f.producer(nil, "dlq", "list", "--json").stdout)) }
	term.answer(t, "n\n")
	if r = producer("dlq", "replay"); r.code != 1 || !strings.Contains(r.stderr, "Replay all 1 dead letter of 1 batch, with fresh attempts? [y/N]") ||
		dlqCount() != 1 {
		t.Fatalf("dlq replay on a terminal, answered no: want exit 1 and the record kept:\n%s", r)
	}
	term.answer(t, "y\n")
	if r = producer("dlq", "replay", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"replayed": 1`) {
		t.Fatalf("dlq replay on a terminal, answered yes:\n%s", r)
	}
	testutil.WaitFor(t, "the replayed item dead-lettered again", time.Minute, func() bool { return dlqCount() == 1 })
	if r = f.producer(nil, "dlq", "replay"); r.code != 0 || strings.Contains(r.stderr, "[y/N]") || !strings.Contains(r.stdout, "Replayed 1 dead letter") {
		t.Fatalf("dlq replay without a terminal: want it done at once:\n%s", r)
	}

	term.answer(t, "n\n")
	if r = producer("batch", "cancel", "slow batch"); r.code != 1 || !strings.Contains(r.stderr, "Cancel batch slow batch (3 of its 3 items not done yet)?") {
		t.Fatalf("batch cancel on a terminal, answered no:\n%s", r)
	}
	if r = f.producer(nil, "batch", "show", "slow batch", "--json"); !strings.Contains(r.stdout, `"state": "running"`) {
		t.Fatalf("the batch after a cancel answered no:\n%s", r)
	}
	term.answer(t, "yes\n")
	var b struct {
		ID, State, Action string
		Out               *int
	}
	r = producer("batch", "cancel", "slow batch", "--json")
	oneJSON(t, "batch cancel --json", r.stdout, &b)
	if r.code != 0 || b.ID != "slow batch" || b.State != "cancelled" || b.Action != "cancel" || b.Out == nil {
		t.Fatalf("batch cancel on a terminal, answered yes:\n%s", r)
	}

	keys := func() int { return len(f.credsList().Credentials) }
	term.answer(t, "n\n")
	if r = producer("creds", "remove", "key-a"); r.code != 1 || !strings.Contains(r.stderr, "Remove credential key-a from pool") || keys() != 1 {
		t.Fatalf("creds remove on a terminal, answered no: want exit 1 and the key kept:\n%s", r)
	}
	if r = producer("creds", "remove", "--yes", "key-a"); r.code != 0 || strings.Contains(r.stderr, "[y/N]") || keys() != 0 {
		t.Fatalf("creds remove --yes on a terminal: want no question and the key removed:\n%s", r)
	}
}
