package producer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/kftype"
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
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 4}`,
		Worker:      "concurrency: 4",
		Jobs: `kinds:
  resize:
    exec: {command: ["{{dir}}/resize.sh"], timeout: 2m}`,
		Env: []string{"KEY_A=sk-cli-a"},
	})
	f.WriteScript("resize.sh", cliScript)
	f.StartWorker("w1")

	// enqueue --json --wait, without --kind.
	path := f.WriteInput("docs.jsonl", `{"id":"ok-1"}`+"\n"+`{"id":"ok-2"}`+"\n"+`{"id":"bad-1"}`+"\n")
	r := f.Producer(nil, "enqueue", "--json", "--wait", "--batch", "docs", path)
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
	e2etest.OneJSON(t, "enqueue --json --wait", r.Stdout, &enq)
	if r.Code != 1 || enq.Batch != "docs" || enq.Items != 3 || enq.New != 3 || enq.Kind != "resize" || enq.Wait == nil ||
		enq.Wait.Total != 3 || enq.Wait.Succeeded != 2 || enq.Wait.Failed != 1 || len(enq.Wait.Failures) != 1 ||
		enq.Wait.Failures[0].Item != "bad-1" || !strings.Contains(r.Stderr, "1 of 3 items failed") {
		t.Fatalf("enqueue --json --wait of kind resize (the only one): want exit 1 and one object:\n%s", r)
	}

	// item show.
	var it itemview.Item
	r = f.Producer(nil, "item", "show", "docs", "bad-1", "--json")
	e2etest.OneJSON(t, "item show --json", r.Stdout, &it)
	if r.Code != 0 || it.State != itemview.StateDeadLettered || it.Reason != kftype.ReasonPermanent || it.Attempts != 1 ||
		it.CredentialID != "key-a" || !strings.Contains(it.Error, "bad item bad-1") || it.Kind != "resize" {
		t.Fatalf("item show of a dead-lettered item:\n%s", r)
	}
	r = f.Producer(nil, "item", "show", "docs", "ok-2")
	if r.Code != 0 || !strings.Contains(r.Stdout, "Item ok-2 of batch docs: succeeded") || !strings.Contains(r.Stdout, "key-a") ||
		!strings.Contains(r.Stdout, "done ok-2") {
		t.Fatalf("item show of a succeeded item:\n%s", r)
	}
	if r = f.Producer(nil, "item", "show", "docs", "nope"); r.Code != 2 || !strings.Contains(r.Stderr, "no item nope in batch docs") {
		t.Fatalf("item show of an unknown item: want exit 2 naming it:\n%s", r)
	}

	// Several kinds: --kind is required, nothing is enqueued.
	two := f.WriteInput("two.yaml", strings.Replace(mustRead(t, f.ConfigPath), "jobs:\n", "jobs:\n  exec: {command: [\"/bin/cat\"]}\n", 1))
	before := f.QueueStats().Stream.Messages
	r = e2etest.RunProducer(t, f.Env, nil, "enqueue", "--config", two, "--batch", "more", f.WriteInput("more.jsonl", `{"id":"m"}`+"\n"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "defines several job kinds: exec, resize; give one of them with --kind") ||
		f.QueueStats().Stream.Messages != before {
		t.Fatalf("enqueue without --kind, two kinds defined: want exit 2 naming them, nothing enqueued:\n%s", r)
	}

	// A lane's consumer names its batch.
	r = f.Producer(nil, "enqueue", "--batch", "slow batch", f.WriteInput("slow.jsonl", `{"id":"slow-1"}`+"\n"+`{"id":"slow-2"}`+"\n"+`{"id":"slow-3"}`+"\n"))
	if r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := f.Queue.JetStream()
	testutil.WaitFor(t, "the slow batch's lane consumer", 30*time.Second, func() bool {
		_, err := js.Consumer(ctx, "KF", f.Queue.LaneConsumerName("slow batch"))
		return err == nil
	})
	stream, err := js.Stream(ctx, "KF")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for ci := range stream.ListConsumers(ctx).Info() {
		if ci.Name != f.Queue.LaneConsumerName("slow batch") {
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
	term := e2etest.NewPseudoTerminal(t)
	producer := func(args ...string) e2etest.Ran {
		return e2etest.CLIRun{Bin: "producer", Args: append(args, "--config", f.ConfigPath), Env: f.Env, Stdin: term.TTY}.Run(t)
	}
	dlqCount := func() int { return len(e2etest.ParseJSONArray(t, f.Producer(nil, "dlq", "list", "--json").Stdout)) }
	term.Answer(t, "n\n")
	if r = producer("dlq", "replay"); r.Code != 1 || !strings.Contains(r.Stderr, "Replay all 1 dead letter of 1 batch, with fresh attempts? [y/N]") ||
		dlqCount() != 1 {
		t.Fatalf("dlq replay on a terminal, answered no: want exit 1 and the record kept:\n%s", r)
	}
	term.Answer(t, "y\n")
	if r = producer("dlq", "replay", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"replayed": 1`) {
		t.Fatalf("dlq replay on a terminal, answered yes:\n%s", r)
	}
	testutil.WaitFor(t, "the replayed item dead-lettered again", time.Minute, func() bool { return dlqCount() == 1 })
	if r = f.Producer(nil, "dlq", "replay"); r.Code != 0 || strings.Contains(r.Stderr, "[y/N]") || !strings.Contains(r.Stdout, "Replayed 1 dead letter") {
		t.Fatalf("dlq replay without a terminal: want it done at once:\n%s", r)
	}

	term.Answer(t, "n\n")
	if r = producer("batch", "cancel", "slow batch"); r.Code != 1 || !strings.Contains(r.Stderr, "Cancel batch slow batch (3 of its 3 items not done yet)?") {
		t.Fatalf("batch cancel on a terminal, answered no:\n%s", r)
	}
	if r = f.Producer(nil, "batch", "show", "slow batch", "--json"); !strings.Contains(r.Stdout, `"state": "running"`) {
		t.Fatalf("the batch after a cancel answered no:\n%s", r)
	}
	term.Answer(t, "yes\n")
	var b struct {
		ID, State, Action string
		Out               *int
	}
	r = producer("batch", "cancel", "slow batch", "--json")
	e2etest.OneJSON(t, "batch cancel --json", r.Stdout, &b)
	if r.Code != 0 || b.ID != "slow batch" || b.State != "cancelled" || b.Action != "cancel" || b.Out == nil {
		t.Fatalf("batch cancel on a terminal, answered yes:\n%s", r)
	}

	keys := func() int { return len(credsList(f).Credentials) }
	term.Answer(t, "n\n")
	if r = producer("creds", "remove", "key-a"); r.Code != 1 || !strings.Contains(r.Stderr, "Remove credential key-a from pool") || keys() != 1 {
		t.Fatalf("creds remove on a terminal, answered no: want exit 1 and the key kept:\n%s", r)
	}
	if r = producer("creds", "remove", "--yes", "key-a"); r.Code != 0 || strings.Contains(r.Stderr, "[y/N]") || keys() != 0 {
		t.Fatalf("creds remove --yes on a terminal: want no question and the key removed:\n%s", r)
	}
}
