package batchlanes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// WriteTimeout bounds the registration of one record's lanes after the
// record was written.
const WriteTimeout = 5 * time.Second

// Writer registers batch records' lanes in a lane schedule.
type Writer struct {
	sched *lanes.Schedule
	// keySets is the key-set part of the classes of each kind the
	// configuration serves (lanes.EveryKey: every key).
	keySets map[string]string
	// tenantWeight is a tenant's configured weight.
	tenantWeight func(tenant string) int
	onError      func(batch string, err error)
}

// Option configures a Writer.
type Option func(*Writer)

// OnError makes fn receive the failures of WriteLanes (the record is
// written all the same; Repair registers its lanes later). Default: none.
func OnError(fn func(batch string, err error)) Option { return func(w *Writer) { w.onError = fn } }

// New returns the writer of sched for the configuration cfg: the kinds it
// serves, their keys, and the tenants' weights, as its workers see them.
// A nil cfg serves no kind (no lane is ever passed over) and weighs every
// tenant TenantWeightDefault.
func New(sched *lanes.Schedule, cfg *config.Config, opts ...Option) (*Writer, error) {
	w := &Writer{sched: sched, keySets: map[string]string{},
		tenantWeight: func(string) int { return config.TenantWeightDefault }}
	if cfg != nil {
		w.tenantWeight = cfg.TenantWeight
		kinds := make([]string, 0, len(jobs.Kinds())+len(cfg.Jobs.Kinds))
		for _, k := range jobs.Kinds() {
			kinds = append(kinds, k.Name)
		}
		for _, kind := range append(kinds, cfg.Jobs.KindNames()...) {
			if _, _, ok := cfg.Jobs.KindSection(kind); !ok {
				continue // not served: a worker of this configuration has no handler for it
			}
			set := lanes.EveryKey
			if ids := cfg.KindKeys(kind); ids != nil {
				ks, err := creds.NewKeySet(ids...)
				if err != nil {
					return nil, fmt.Errorf("jobs.kinds.%s: %w", kind, err)
				}
				set = ks.Name()
			}
			w.keySets[kind] = set
		}
	}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// Lanes are b's lanes as the schedule takes them.
func (w *Writer) Lanes(b kftype.BatchInfo) []lanes.Lane {
	out := make([]lanes.Lane, 0, 1+len(b.Scopes))
	for _, lane := range b.Lanes() {
		out = append(out, lanes.Lane{ID: lane, State: string(b.State), Priority: b.Priority, Weight: b.Weight, Gen: b.Rev,
			Classes: w.classes(b, lane), Tenant: b.Tenant, TenantWeight: w.tenantWeight(b.Tenant)})
	}
	return out
}

// classes are the classes of lane's items: one per kind of its batch, at
// the lane's scope. A kind the configuration does not serve gets a class
// of its own, which no worker is ever full of. No kinds: none (the lane is
// never passed over).
func (w *Writer) classes(b kftype.BatchInfo, lane string) []string {
	_, scope := kftype.LaneParts(lane)
	var out []string
	for _, kind := range b.Kinds {
		class := "?" + kind + "|" + scope
		if set, ok := w.keySets[kind]; ok {
			class = lanes.Class(set, scope)
		}
		if strings.ContainsAny(class, " \t\n\v\f\r") || slices.Contains(out, class) {
			continue
		}
		out = append(out, class)
	}
	return out
}

// Write registers b's lanes at b's revision: running lanes join the
// schedule, paused and cancelled ones leave it. A newer revision
// registered already wins (lanes.Stale).
func (w *Writer) Write(ctx context.Context, b kftype.BatchInfo) error {
	for _, l := range w.Lanes(b) {
		if _, err := w.sched.Sync(ctx, l); err != nil {
			return fmt.Errorf("batch %q: %w", b.ID, err)
		}
	}
	return nil
}

// WriteLanes is Write after a record was written (queue.LaneWriter),
// within WriteTimeout even when ctx has ended (the record is written: its
// lanes must follow). A failure goes to OnError.
func (w *Writer) WriteLanes(ctx context.Context, b kftype.BatchInfo) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
	defer cancel()
	if err := w.Write(ctx, b); err != nil && w.onError != nil {
		w.onError(b.ID, err)
	}
}

// Repair registers again the lanes of records that the schedule holds at
// an older revision than the record's, or not at all: what a writer that
// could not reach Redis, or died between the record and its lanes, left
// undone, and everything after Redis lost the schedule. Lanes the
// schedule holds at their record's revision are left as they are (their
// places in it kept). records are every record the caller knows: once
// each is registered, the schedule is complete (lanes.Schedule.Complete).
// It returns how many batches it registered again.
func (w *Writer) Repair(ctx context.Context, records []kftype.BatchInfo) (int, error) {
	var ids []string
	var of []int // the record of each lane in ids
	for i, b := range records {
		if b.Deleted {
			continue
		}
		for _, lane := range b.Lanes() {
			ids = append(ids, lane)
			of = append(of, i)
		}
	}
	var gens []uint64
	if len(ids) > 0 {
		var err error
		if gens, err = w.sched.Gens(ctx, ids); err != nil {
			return 0, err
		}
	}
	behind := map[int]bool{}
	for j, g := range gens {
		if g < records[of[j]].Rev {
			behind[of[j]] = true
		}
	}
	n := 0
	for i := range records {
		if !behind[i] {
			continue
		}
		if err := w.Write(ctx, records[i]); err != nil {
			return n, err
		}
		n++
	}
	return n, w.sched.Complete(ctx)
}
