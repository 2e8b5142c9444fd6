package executor

import (
	"context"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Collaborators that do nothing, for measuring the executor alone.
type (
	nopDelivery struct{ it kftype.Item }
	nopPool     struct{ l creds.Lease }
	nopRecorder struct{}
	nopRunLog   struct{}
	nopBatches  struct{}
	nopHost     struct{}
	nopHandler  struct{}
)

func (d *nopDelivery) Item() (kftype.Item, error)               { return d.it, nil }
func (d *nopDelivery) Delivered() uint64                        { return 1 }
func (d *nopDelivery) Subject() string                          { return "s" }
func (d *nopDelivery) Ack(context.Context) error                { return nil }
func (d *nopDelivery) Nak(context.Context, time.Duration) error { return nil }
func (d *nopDelivery) Term(context.Context, string) error       { return nil }
func (d *nopDelivery) InProgress(context.Context) error         { return nil }
func (p *nopPool) AcquireWith(context.Context, creds.Request) (*creds.Lease, error) {
	return &p.l, nil
}
func (p *nopPool) TryAcquireWith(context.Context, creds.Request) (*creds.Lease, error) {
	return &p.l, nil
}
func (p *nopPool) Renew(context.Context, *creds.Lease) (time.Time, error) { return time.Time{}, nil }
func (p *nopPool) SettleAsync(_ *creds.Lease, _ creds.Outcome, done func(error)) error {
	done(nil)
	return nil
}
func (p *nopPool) ReleaseUnused(context.Context, *creds.Lease) error { return nil }
func (p *nopPool) Rest(context.Context, string, time.Duration, string, string) (time.Time, error) {
	return time.Time{}, nil
}
func (nopRecorder) Commit(context.Context, kftype.Result, Delivery) error { return nil }
func (nopRecorder) PutResult(context.Context, kftype.Result) error        { return nil }
func (nopRecorder) PutDeadLetter(context.Context, kftype.DeadLetter) error {
	return nil
}
func (nopRecorder) CancelItem(context.Context, Delivery, kftype.Item, string) (bool, error) {
	return true, nil
}
func (nopRunLog) Do(context.Context, string, string, string, uint64, int, string) (RunCount, error) {
	return RunCount{}, nil
}
func (nopBatches) State(string) (kftype.BatchState, int) {
	return kftype.BatchRunning, creds.PriorityDefault
}
func (nopBatches) Poke()                       {}
func (nopHost) RedisUp(bool)                   {}
func (nopHost) Register(context.Context) error { return nil }
func (nopHandler) Kind() string                { return "sleep" }
func (nopHandler) Run(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	return jobs.Output{}, nil
}

// What the executor itself costs for an item that succeeds at once (the
// common case): its allocations per item, beside what the real
// collaborators cost.
func BenchmarkExecuteSucceeded(b *testing.B) {
	e, err := New(Config{
		ID: "w1", Kinds: map[string]Kind{"sleep": {Handler: nopHandler{}, KeyCount: 1}}, KindNames: []string{"sleep"},
		Scrub: secret.NewScrubber(), Policy: Policy{MaxAttempts: 3, RetryDelay: func(int) time.Duration { return time.Second },
			AckWait: 30 * time.Second, LeaseTTL: 30 * time.Second, CostField: "cost", CostDefault: 1},
		Pool: &nopPool{l: creds.Lease{CredentialID: "a"}}, Recorder: nopRecorder{}, Runs: nopRunLog{}, Batches: nopBatches{},
		Waits: NewClassWaits(4), Host: nopHost{},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	d := &nopDelivery{it: kftype.Item{ID: "i1", Batch: "b1", Kind: "sleep", Payload: []byte(`{"id":"i1"}`)}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if o := e.Execute(ctx, ctx, d); o.Fate != Succeeded {
			b.Fatalf("outcome %+v", o)
		}
	}
}
