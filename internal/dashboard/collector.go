package dashboard

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/version"
)

// Bounds of one collection.
const (
	readTimeout     = 10 * time.Second
	maxDeadLetters  = 100
	deadLetterEvery = 30 * time.Second // the list is read again at least this often...
	deadLetterGap   = 2 * time.Second  // ...and at most this often, when the count changes
	retryMin        = 500 * time.Millisecond
	retryMax        = 10 * time.Second
)

// collect reads the fleet every interval (and at once after a write
// action), keeps the history, and publishes a snapshot on the board. The
// results stream and the batch records are followed by their own
// goroutines. It returns when ctx ends.
func (s *Server) collect(ctx context.Context) {
	go s.follow(ctx, "the results stream", func(ctx context.Context) error {
		return s.q.FollowResults(ctx, func(r kftype.Result) error { s.tally.result(r); return nil }, s.tally.caughtUp)
	})
	go s.follow(ctx, "the batch records", func(ctx context.Context) error {
		return s.q.WatchBatches(ctx, s.tally.record)
	})
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		s.collectOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.poke:
		}
	}
}

// follow runs watch again after each failure, with a growing wait, until
// ctx ends.
func (s *Server) follow(ctx context.Context, what string, watch func(context.Context) error) {
	wait := retryMin
	for {
		start := time.Now()
		err := watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > retryMax {
			wait = retryMin // it ran for a while: a fresh failure
		}
		s.log.Warn("following "+what+" failed; retrying", zap.Error(err), zap.Duration("in", wait))
		if ctxsleep.Sleep(ctx, wait) != nil {
			return
		}
		wait = min(2*wait, retryMax)
	}
}

// collectOnce takes one snapshot.
func (s *Server) collectOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	now := time.Now().UTC()
	rep, err := status.Read(rctx, s.q, s.pool)
	s.seq++
	meta := Meta{
		ReadOnly: s.api.ReadOnly(), IntervalMS: s.interval.Milliseconds(), HistorySeconds: int64(s.span.Seconds()),
		Sample: s.seq, HeartbeatTTLSeconds: s.q.Config().HeartbeatTTL.Seconds(), Version: version.Version,
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		meta.Error, meta.ErrorAt = s.scrub(err.Error()), &now
		if s.haveLast {
			rep = s.last
		}
		s.logErr.Do(func() { s.log.Warn("reading the fleet failed", zap.Error(err)) })
	} else {
		if l := s.ledger; l != nil && len(s.tenants) > 0 {
			if ts, err := status.Tenants(rctx, l, s.tenants, now); err == nil {
				rep.Tenants = ts
			} else {
				s.logErr.Do(func() { s.log.Warn("reading the tenants' spend failed", zap.Error(err)) })
			}
		}
		s.last, s.haveLast = rep, true
		s.hist.add(rep.At, rep.Pool)
		s.mets.observe(rep)
		s.readDeadLetters(rctx, rep.DeadLetters)
		s.readProviderBatches(rctx)
	}
	s.tally.mu.Lock()
	meta.ResultsCaughtUp = s.tally.ready
	s.tally.mu.Unlock()
	rows := s.tally.rows(now)
	if s.ledger != nil {
		if err := batchview.Spend(rctx, s.ledger, rows); err != nil {
			s.logErr.Do(func() { s.log.Warn("reading the batches' spend failed", zap.Error(err)) })
		}
	}
	snap := Snapshot{Report: rep, Batches: rows, DeadLetterList: s.deadLetters, Dashboard: meta}
	full, err := json.Marshal(snap)
	if err != nil {
		s.log.Error("encoding the snapshot", zap.Error(err))
		return
	}
	public, err := json.Marshal(snap.Public())
	if err != nil {
		s.log.Error("encoding the snapshot", zap.Error(err))
		return
	}
	s.board.publish(full, public)
}

// readDeadLetters reads the newest dead letters again when their count
// changed (at most every deadLetterGap) or deadLetterEvery has passed.
func (s *Server) readDeadLetters(ctx context.Context, count uint64) {
	since := time.Since(s.dlReadAt)
	if s.deadLetters != nil && (count == s.dlCount || since < deadLetterGap) && since < deadLetterEvery {
		return
	}
	var all []DeadLetter
	err := s.q.ListDeadLetters(ctx, "", func(d kftype.DeadLetter) error {
		row := d.DeadLetterSummary
		row.Error = s.scrub(row.Error)
		all = append(all, row)
		return nil
	})
	if err != nil {
		s.log.Warn("reading the dead letters", zap.Error(err))
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].FailedAt.After(all[j].FailedAt) })
	if len(all) > maxDeadLetters {
		all = all[:maxDeadLetters]
	}
	if all == nil {
		all = []DeadLetter{}
	}
	s.deadLetters, s.dlCount, s.dlReadAt = all, count, time.Now()
}
