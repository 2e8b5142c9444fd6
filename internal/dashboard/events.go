package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// board holds the latest snapshot and tells every waiting page when a new
// one is published: one JSON encoding per interval, however many pages
// watch.
type board struct {
	mu      sync.Mutex
	full    []byte // the latest snapshot's JSON, with the admin token
	public  []byte // the same without job and API text (Snapshot.Public)
	seq     uint64 // snapshots published so far
	changed chan struct{}
}

func newBoard() *board { return &board{changed: make(chan struct{})} }

func (b *board) publish(full, public []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.full, b.public = full, public
	b.seq++
	close(b.changed)
	b.changed = make(chan struct{})
}

// latest returns the latest snapshot (nil before the first), in full or
// public, its number, and a channel closed when the next one is
// published.
func (b *board) latest(full bool) ([]byte, uint64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if full {
		return b.full, b.seq, b.changed
	}
	return b.public, b.seq, b.changed
}

// wait returns the first snapshot (full or public), waiting for it if
// needed.
func (b *board) wait(ctx context.Context, full bool) ([]byte, error) {
	for {
		data, _, next := b.latest(full)
		if data != nil {
			return data, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-next:
		}
	}
}

// sseKeepAlive spaces the comments that keep an idle event stream open
// through proxies (snapshots normally come far more often).
const sseKeepAlive = 15 * time.Second

// serveEvents streams every snapshot as a server-sent event ("status")
// until the page goes away or the server stops (done): in full with the
// admin token, else public.
func (s *Server) serveEvents(rw http.ResponseWriter, r *http.Request) {
	full := s.readsJobText(r)
	fl, ok := rw.(http.Flusher)
	if !ok {
		http.Error(rw, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rw.WriteHeader(http.StatusOK)
	fmt.Fprintf(rw, "retry: %d\n\n", max(1000, s.interval.Milliseconds()))
	fl.Flush()
	keep := time.NewTicker(sseKeepAlive)
	defer keep.Stop()
	var sent uint64
	for {
		data, seq, next := s.board.latest(full)
		rc := http.NewResponseController(rw)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if data != nil && seq != sent {
			if _, err := fmt.Fprintf(rw, "event: status\ndata: %s\n\n", data); err != nil {
				return
			}
			fl.Flush()
			sent = seq
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-keep.C:
			_ = http.NewResponseController(rw).SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := fmt.Fprint(rw, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-next:
		}
	}
}
