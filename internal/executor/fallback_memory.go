package executor

import (
	"context"
	"sync"
)

// What a worker remembers of the kinds with a fallback (fallback.go), per
// kind and scope: it changes how its next items start, never where they
// end, and is forgotten as soon as the kind serves again.

// stuckRoutes remembers, per kind and scope, the kinds whose keys could
// not serve a wait of their After in this worker, until they grant a key
// again: their items try them once instead of waiting; and the kinds
// whose items moved for failing, until one of their items runs to the end
// on them again: their items' first failure is retried at once.
type stuckRoutes struct {
	mu      sync.Mutex
	m       map[string]bool
	failing map[string]bool
	probes  map[string]chan struct{} // one probe at a time per kind and scope (probe)
}

// lock takes the probe lock of kind and scope, waiting for the probe in
// flight; it fails with ErrDraining when pullCtx ends first, or with
// itemCtx's cause.
func (s *stuckRoutes) lock(pullCtx, itemCtx context.Context, kind, scope string) (unlock func(), err error) {
	s.mu.Lock()
	ch := s.probes[routeKey(kind, scope)]
	if ch == nil {
		ch = make(chan struct{}, 1)
		s.probes[routeKey(kind, scope)] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-pullCtx.Done():
		return nil, ErrDraining
	case <-itemCtx.Done():
		return nil, context.Cause(itemCtx)
	}
}

func routeKey(kind, scope string) string { return kind + "\x00" + scope }

func (s *stuckRoutes) stuck(kind, scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[routeKey(kind, scope)]
}

// isFailing reports whether items of kind and scope moved for failing
// and none has run to the end on it since.
func (s *stuckRoutes) isFailing(kind, scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing[routeKey(kind, scope)]
}

func (s *stuckRoutes) setFailing(kind, scope string, failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if failing {
		s.failing[routeKey(kind, scope)] = true
	} else if len(s.failing) > 0 {
		delete(s.failing, routeKey(kind, scope))
	}
}

func (s *stuckRoutes) set(kind, scope string, stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stuck {
		s.m[routeKey(kind, scope)] = true
	} else if len(s.m) > 0 {
		delete(s.m, routeKey(kind, scope))
	}
}
