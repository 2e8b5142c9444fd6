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
)

// tally counts the items of the input by their latest outcome.
type tally struct {
	total             int
	succeeded, failed atomic.Int64
}

func (t *tally) done() int64 { return t.succeeded.Load() + t.failed.Load() }

// follow waits until every item of ids (the input, total items) has an
// outcome in batch, showing progress on stderr, then prints the summary.
// Each item counts once, by its latest outcome, however often it ran.
func (p *producer) follow(ctx context.Context, q *queue.Queue, batch string, ids *jsonl.IDs, total int, start time.Time) error {
	t := &tally{total: total}
	states := make(map[jsonl.Key]uint8, total)
	type failure struct{ item, err string }
	failures := map[jsonl.Key]failure{}

	stopProgress := p.showProgress(termsafe.String(batch), t, start)
	err := q.WatchResults(ctx, batch, func(r queue.Result) (bool, error) {
		k := ids.Key(r.Item)
		if !ids.Has(k) {
			return true, nil // another input's item in the same batch
		}
		now := stateSucceeded
		if r.Outcome != queue.OutcomeSucceeded {
			now = stateFailed
		}
		switch states[k] {
		case now:
			return t.done() < int64(total), nil
		case stateSucceeded:
			t.succeeded.Add(-1)
		case stateFailed:
			t.failed.Add(-1)
		}
		states[k] = now
		if now == stateSucceeded {
			t.succeeded.Add(1)
			delete(failures, k)
		} else {
			t.failed.Add(1)
			if len(failures) < maxFailuresShown {
				failures[k] = failure{item: r.Item, err: r.Error}
			}
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

	failed := t.failed.Load()
	fmt.Fprintf(p.stdout, "\nBatch %s complete:\n", termsafe.String(batch))
	fmt.Fprintf(p.stdout, "  Total: %d\n", total)
	fmt.Fprintf(p.stdout, "  Succeeded: %d\n", t.succeeded.Load())
	fmt.Fprintf(p.stdout, "  Failed: %d\n", failed)
	fmt.Fprintf(p.stdout, "  Duration: %.2fs\n", elapsed.Seconds())
	fmt.Fprintf(p.stdout, "  Items/s: %.1f\n", float64(total)/max(elapsed.Seconds(), 1e-3))
	if failed == 0 {
		return nil
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
				ok, failed := t.succeeded.Load(), t.failed.Load()
				bar.Describe(fmt.Sprintf("%d ok, %d failed", ok, failed))
				_ = bar.Set64(ok + failed)
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
	fmt.Fprintf(w, "batch %s: %d/%d items done (%d succeeded, %d failed), %.1f items/s, ETA %s\n",
		batch, done, t.total, t.succeeded.Load(), t.failed.Load(), rate, eta)
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
