package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Probes bring back the keys the API disabled (docs/limits.md, "Disabled
// keys come back"): with
// pool.probe_interval set, every worker looks at the pool once per
// interval and probes each key the API disabled that it holds the secret
// of, if it wins the key's fleet-wide probe claim for the interval, so
// that the fleet probes each key about once per interval, not once per
// worker. A key an operator disabled is never probed. A probe that passes
// enables the key again (creds.Pool.EnableAfterProbe, which leaves it
// alone if an operator disabled it meanwhile), with the probe's answer as
// the cause.

const (
	// probeTimeoutMax bounds one probe; a shorter interval bounds it
	// instead.
	probeTimeoutMax = 10 * time.Second
	// probeParallel bounds the probes a worker runs at once.
	probeParallel = 4
	// probeClaimSlack shortens a claim below the interval (by at most a
	// twentieth of it), so that the worker that probed a key finds its
	// claim lapsed when its next round comes, a timer's jitter
	// notwithstanding.
	probeClaimSlack = 250 * time.Millisecond
)

// kindProber is the probe of one job kind.
type kindProber struct {
	kind string
	keys []string // the keys the kind may use (nil: every key)
	p    jobs.Prober
}

// buildProbers returns the probes of the configured kinds that have one,
// in a fixed order; none when pool.probe_interval is 0. Its errors are
// configuration errors (a probe_command that cannot run).
func buildProbers(cfg *config.Config, common jobs.Common) ([]kindProber, error) {
	every := cfg.Pool.ProbeInterval
	if every <= 0 {
		return nil, nil
	}
	timeout := min(every, probeTimeoutMax)
	var out []kindProber
	secs := cfg.Jobs.ProbeSections()
	for _, name := range slices.Sorted(maps.Keys(secs)) {
		p, err := secs[name].NewProber(common, timeout)
		if err != nil {
			if _, named := cfg.Jobs.Kinds[name]; named {
				return nil, fmt.Errorf("jobs.kinds.%s: %w", name, err)
			}
			return nil, fmt.Errorf("jobs.%s: %w", name, err)
		}
		out = append(out, kindProber{kind: name, keys: cfg.KindKeys(name), p: p})
	}
	if len(out) == 0 {
		return nil, errors.New("pool.probe_interval is set, but no job kind has a probe")
	}
	return out, nil
}

// probersFor returns the probes that may try credential id: those of the
// kinds that may use it.
func (w *Worker) probersFor(id string) []kindProber {
	var out []kindProber
	for _, p := range w.probers {
		if p.keys == nil || slices.Contains(p.keys, id) {
			out = append(out, p)
		}
	}
	return out
}

// probeLoop probes the keys the API disabled every pool.probe_interval
// until ctx ends; a round in progress is cancelled with it.
func (w *Worker) probeLoop(ctx context.Context) {
	every := w.cfg.Pool.ProbeInterval
	if every <= 0 || len(w.probers) == 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.probeRound(ctx, every)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeRound probes, at most probeParallel at a time, every key of this
// worker the API disabled whose claim for this interval it wins, and
// returns when they are done.
func (w *Worker) probeRound(ctx context.Context, every time.Duration) {
	st, err := w.pool.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("probes: reading the pool", zap.Error(err))
		}
		return
	}
	claim := every - min(every/20, probeClaimSlack)
	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	for _, c := range st.Credentials {
		if c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByAPI {
			continue
		}
		if _, ok := w.secrets[c.ID]; !ok {
			continue
		}
		won, err := w.pool.ClaimProbe(ctx, c.ID, w.id, claim)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("probes: claiming a probe", zap.String("credential", c.ID), zap.Error(err))
			}
			return
		}
		if !won {
			continue // another worker probes it in this interval
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			w.probeCredential(ctx, c.ID)
		})
	}
	wg.Wait()
}

// probeCredential tries credential id with each probe that may, until one
// passes, and then enables it again.
func (w *Worker) probeCredential(ctx context.Context, id string) {
	log := w.log.With(zap.String("credential", id))
	cred := jobs.Credential{ID: id, Secret: w.secrets[id], URL: w.credURLs[id]}
	var reasons []string
	for _, kp := range w.probersFor(id) {
		cause, err := kp.p.Probe(ctx, cred)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			reasons = append(reasons, w.scrub.String(err.Error()))
			continue
		}
		cause = w.scrub.String(cause)
		enabled, err := w.pool.EnableAfterProbe(ctx, id, cause)
		switch {
		case err != nil:
			log.Warn("a probe passed, but the credential could not be enabled", zap.String("cause", cause), zap.Error(err))
		case enabled:
			log.Info("credential enabled again by a probe", zap.String("cause", cause), zap.String("kind", kp.kind))
		default:
			log.Debug("a probe passed, but the credential is no longer disabled by the API (an operator changed it meanwhile)",
				zap.String("cause", cause))
		}
		return
	}
	log.Debug("probe: the credential still does not work", zap.Strings("reasons", reasons))
}
