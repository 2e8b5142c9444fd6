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
	"github.com/keyfleet/keyfleet/internal/kftype"
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
	case kftype.OutcomeSucceeded:
		return stateSucceeded
	case kftype.OutcomeCancelled:
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

// waitSummary is what following a batch found: the seeds' summary, and
// the first failed items (at most maxFailuresShown) with their errors.
type waitSummary struct {
	Total          int       `json:"total"`
	Succeeded      int64     `json:"succeeded"`
	Failed         int64     `json:"failed"`
	Cancelled      int64     `json:"cancelled"`
	Duration       float64   `json:"duration_seconds"`
	ItemsPerSecond float64   `json:"items_per_second"`
	Failures       []failure `json:"failures"`
}

// failure is a failed item of a waitSummary.
type failure struct {
	Item  string `json:"item"`
	Error string `json:"error"`
}

// follow waits until every item of ids (the input, total items) has an
// outcome in batch, showing progress on stderr, and returns the summary
// (nil when the waiting stopped first) with an error carrying the exit
// code: 1 if any item failed or was cancelled. Each item counts once, by
// its latest outcome, however often it ran. An item of a cancelled batch
// that never ran has the outcome "cancelled" (the cancel and the workers
// record one for every such item), so following a batch that is cancelled
// ends too.
func (p *producer) follow(ctx context.Context, q *queue.Queue, batch string, ids *jsonl.IDs, total int, start time.Time) (*waitSummary, error) {
	t := &tally{total: total}
	states := newItemStates(ids)
	failures := map[jsonl.Key]failure{}

	stopProgress := p.showProgress(termsafe.String(batch), t, start)
	err := q.WatchResults(ctx, batch, func(r kftype.Result) (bool, error) {
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
				failures[k] = failure{Item: r.Item, Error: r.Error}
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
			return nil, exitcode.With(exitcode.Interrupted, fmt.Errorf(
				"interrupted: stopped waiting with %d of %d items done (%d failed); the batch goes on: %s",
				done, total, t.failed.Load(), follow))
		}
		return nil, unreachable(fmt.Sprintf("following batch %s (%d of %d items done; the batch goes on: %s)",
			batch, done, total, follow), err)
	}

	s := &waitSummary{Total: total, Succeeded: t.succeeded.Load(), Failed: t.failed.Load(), Cancelled: t.cancelled.Load(),
		Duration: elapsed.Seconds(), ItemsPerSecond: float64(total) / max(elapsed.Seconds(), 1e-3), Failures: []failure{}}
	for _, f := range failures {
		s.Failures = append(s.Failures, f)
	}
	sort.Slice(s.Failures, func(i, j int) bool { return s.Failures[i].Item < s.Failures[j].Item })
	switch {
	case s.Failed == 0 && s.Cancelled == 0:
		return s, nil
	case s.Failed == 0:
		return s, exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items were cancelled", s.Cancelled, total))
	case s.Cancelled > 0:
		return s, exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items failed and %d were cancelled", s.Failed, total, s.Cancelled))
	}
	return s, exitcode.With(exitcode.Failed, fmt.Errorf("%d of %d items failed", s.Failed, total))
}

// printSummary prints the summary of following batch.
func printSummary(w io.Writer, batch string, s *waitSummary) {
	fmt.Fprintf(w, "\nBatch %s complete:\n", termsafe.String(batch))
	fmt.Fprintf(w, "  Total: %d\n", s.Total)
	fmt.Fprintf(w, "  Succeeded: %d\n", s.Succeeded)
	fmt.Fprintf(w, "  Failed: %d\n", s.Failed)
	fmt.Fprintf(w, "  Cancelled: %d\n", s.Cancelled)
	fmt.Fprintf(w, "  Duration: %.2fs\n", s.Duration)
	fmt.Fprintf(w, "  Items/s: %.1f\n", s.ItemsPerSecond)
	if s.Cancelled > 0 {
		fmt.Fprintf(w, "The batch was cancelled: %d %s never ran (`producer results --batch %s` lists them as cancelled).\n",
			s.Cancelled, plural(int(s.Cancelled), "item", "items"), termsafe.String(batch))
	}
	if s.Failed == 0 {
		return
	}
	fmt.Fprintf(w, "Failed items (`producer dlq list --batch %s` lists them all):\n", termsafe.String(batch))
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  - %s: %s\n", termsafe.String(f.Item), oneLine(f.Error, 200))
	}
	if int64(len(s.Failures)) < s.Failed {
		fmt.Fprintf(w, "  ... and %d more\n", s.Failed-int64(len(s.Failures)))
	}
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
