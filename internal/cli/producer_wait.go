package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// maxFailuresShown bounds the failed items listed under the summary.
const maxFailuresShown = 10

// Item states while following a batch.
const (
	stateNone uint8 = iota
	stateSucceeded
	stateFailed
	stateCancelled
)

// outcomeState is the state a result's outcome puts its item in.
func outcomeState(outcome string) uint8 {
	switch outcome {
	case queue.OutcomeSucceeded:
		return stateSucceeded
	case queue.OutcomeCancelled:
		return stateCancelled
	}
	return stateFailed
}

// tally counts the items of the input by their latest outcome.
type tally struct {
	total                        int
	succeeded, failed, cancelled atomic.Int64
}

// done counts the items with an outcome: a cancelled item is done.
func (t *tally) done() int64 { return t.succeeded.Load() + t.failed.Load() + t.cancelled.Load() }

// counter is the count of items in state (nil for stateNone).
func (t *tally) counter(state uint8) *atomic.Int64 {
	switch state {
	case stateSucceeded:
		return &t.succeeded
	case stateFailed:
		return &t.failed
	case stateCancelled:
		return &t.cancelled
	}
	return nil
}

// itemStates keeps the latest state of each item of the input: a byte an
// item, at its place in the input's IDs set (jsonl.IDs.Index), so that
// following a batch of 10M items costs 10 MB on top of the set's 8 bytes
// an item. The items whose first hashes collide (never, in practice) are
// kept apart in a map.
type itemStates struct {
	ids    *jsonl.IDs
	at     []uint8
	shared map[jsonl.Key]uint8
}

func newItemStates(ids *jsonl.IDs) *itemStates {
	return &itemStates{ids: ids, at: make([]uint8, ids.Len()), shared: map[jsonl.Key]uint8{}}
}

// set records item k's state now and returns the one it had; ok is false
// when k is not an item of the input (another input's in the same batch).
func (s *itemStates) set(k jsonl.Key, now uint8) (was uint8, ok bool) {
	i, ok := s.ids.Index(k)
	if !ok {
		return stateNone, false
	}
	if s.ids.Shared(k) {
		was, s.shared[k] = s.shared[k], now
		return was, true
	}
	was, s.at[i] = s.at[i], now
	return was, true
}

// follow waits until every item of ids (the input, total items) has an
// outcome in batch, showing progress on stderr, then prints the summary.
// Each item counts once, by its latest outcome, however often it ran. An
// item of a cancelled batch that never ran has the outcome "cancelled"
// (the cancel and the workers record one for every such item), so
// following a batch that is cancelled ends too.
func (p *producer) follow(ctx context.Context, q *queue.Queue, batch string, ids *jsonl.IDs, total int, start time.Time) error {
	t := &tally{total: total}
	states := newItemStates(ids)
	type failure struct{ item, err string }
	failures := map[jsonl.Key]failure{}

	stopProgress := p.showProgress(termsafe.String(batch), t, start)
	err := q.WatchResults(ctx, batch, func(r queue.Result) (bool, error) {
		k := ids.Key(r.Item)
		now := outcomeState(r.Outcome)
		was, ok := states.set(k, now)
		switch {
		case !ok:
			return true, nil // another input's item in the same batch
		case was == now:
			return t.done() < int64(total), nil
		}
		if c := t.counter(was); c != nil {
			c.Add(-1)
		}
		t.counter(now).Add(1)
		if now == stateFailed {
			if len(failures) < maxFailuresShown {
				failures[k] = failure{item: r.Item, err: r.Error}
			}
		} else {
			delete(failures, k)
		}
		return t.done() < int64(total), nil
	})
	stopProgress()
	elapsed := time.Since(start)
	done := t.done()
	if err != nil {
		follow := fmt.Sprintf("follow it again by rerunning this command with --wait (the items already enqueued are not added twice), "+
			"or with `producer status` and `producer results --batch %s`", batch)
		if ctx.Err() != nil {
			return exitcode.With(exitcode.Interrupted, fmt.Errorf(
				"interrupted: stopped waiting with %d of %d items done (%d failed); the batch goes on: %s",
				done, total, t.failed.Load(), follow))
		}
		return unreachable(fmt.Sprintf("following batch %s (%d of %d items done; the batch goes on: %s)",
			batch, done, total, follow), err)
	}

	failed, cancelled := t.failed.Load(), t.cancelled.Load()
	fmt.Fprintf(p.stdout, "\nBatch %s complete:\n", termsafe.String(batch))
	fmt.Fprintf(p.stdout, "  Total: %d\n", total)
	fmt.Fprintf(p.stdout, "  Succeeded: %d\n", t.succeeded.Load())
	fmt.Fprintf(p.stdout, "  Failed: %d\n", failed)
	fmt.Fprintf(p.stdout, "  Cancelled: %d\n", cancelled)
	fmt.Fprintf(p.stdout, "  Duration: %.2fs\n", elapsed.Seconds())
	fmt.Fprintf(p.stdout, "  Items/s: %.1f\n", float64(total)/max(elapsed.Seconds(), 1e-3))
	if cancelled > 0 {
		fmt.Fprintf(p.stdout, "The batch was cancelled: %d %s never ran (`producer results --batch %s` lists them as cancelled).\n",
			cancelled, plural(int(cancelled), "item", "items"), termsafe.String(batch))
	}
	if failed == 0 && cancelled == 0 {
		return nil
	}
	if failed == 0 {
		return exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items were cancelled", cancelled, total))
	}
	list := make([]failure, 0, len(failures))
	for _, f := range failures {
		list = append(list, f)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].item < list[j].item })
	fmt.Fprintf(p.stdout, "Failed items (`producer dlq list --batch %s` lists them all):\n", termsafe.String(batch))
	for _, f := range list {
		fmt.Fprintf(p.stdout, "  - %s: %s\n", termsafe.String(f.item), oneLine(f.err, 200))
	}
	if int64(len(list)) < failed {
		fmt.Fprintf(p.stdout, "  ... and %d more\n", failed-int64(len(list)))
	}
	if cancelled > 0 {
		return exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items failed and %d were cancelled", failed, total, cancelled))
	}
	return exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items failed", failed, total))
}

// showProgress renders progress on stderr until the returned func is
// called: a bar on a terminal, a line every progressEvery otherwise.
func (p *producer) showProgress(batch string, t *tally, start time.Time) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	if isTerminal(p.stderr) {
		bar := progressbar.NewOptions64(int64(t.total),
			progressbar.OptionSetWriter(p.stderr),
			progressbar.OptionSetDescription("batch "+batch),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("items"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionFullWidth(),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
		)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				ok, failed, cancelled := t.succeeded.Load(), t.failed.Load(), t.cancelled.Load()
				if cancelled > 0 {
					bar.Describe(fmt.Sprintf("%d ok, %d failed, %d cancelled", ok, failed, cancelled))
				} else {
					bar.Describe(fmt.Sprintf("%d ok, %d failed", ok, failed))
				}
				_ = bar.Set64(ok + failed + cancelled)
				select {
				case <-quit:
					if t.done() == int64(t.total) {
						_ = bar.Finish()
					}
					fmt.Fprintln(p.stderr)
					return
				case <-tick.C:
				}
			}
		}()
	} else {
		go func() {
			defer wg.Done()
			tick := time.NewTicker(progressEvery)
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
					progressLine(p.stderr, batch, t, time.Since(start))
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// progressLine prints one plain progress line.
func progressLine(w io.Writer, batch string, t *tally, elapsed time.Duration) {
	done := t.done()
	rate := float64(done) / max(elapsed.Seconds(), 1e-3)
	eta := "unknown"
	if rate > 0 {
		eta = time.Duration(float64(int64(t.total)-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	cancelled := ""
	if c := t.cancelled.Load(); c > 0 {
		cancelled = fmt.Sprintf(", %d cancelled", c)
	}
	fmt.Fprintf(w, "batch %s: %d/%d items done (%d succeeded, %d failed%s), %.1f items/s, ETA %s\n",
		batch, done, t.total, t.succeeded.Load(), t.failed.Load(), cancelled, rate, eta)
}

// flatten turns line breaks and tabs into spaces.
var flatten = strings.NewReplacer("\n", " ", "\r", " ", "\t", " ")

// oneLine flattens text from a job or an API onto one line of at most n
// bytes (cut at a character's start) and escapes whatever else a terminal
// could act on (termsafe.String).
func oneLine(s string, n int) string {
	cut := ""
	if len(s) > n {
		for back := 0; n > 0 && back < utf8.UTFMax-1 && !utf8.RuneStart(s[n]); back++ {
			n--
		}
		s, cut = s[:n], "…"
	}
	return termsafe.String(flatten.Replace(s)) + cut
}
