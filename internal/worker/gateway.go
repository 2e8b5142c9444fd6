package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/gateway"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// gatewayServer is the gateway a worker with gateway.listen serves
// (docs/gateway.md): built and bound in Start, served while Run runs.
type gatewayServer struct {
	gw  *gateway.Gateway
	srv *http.Server
	l   net.Listener
}

// startGateway builds the gateway on the worker's pool and binds its
// address; nothing when gateway.listen is not set. A taken address is a
// configuration error.
func (w *Worker) startGateway() error {
	cfg := w.cfg
	if cfg.Gateway.Listen == "" {
		return nil
	}
	policy := executor.PolicyFrom(cfg, w.q.Config(), w.pool.LeaseTTL())
	var ledger gateway.Ledger
	if w.ledger != nil {
		ledger = w.ledger
	}
	gw, err := gateway.New(gateway.Config{
		ID: w.id, Kinds: gateway.KindsFrom(cfg, w.kindKeys), Tokens: w.gwTokens, MaxWait: cfg.Gateway.MaxWait,
		Pool: w.pool, LeaseTTL: w.pool.LeaseTTL(), Secrets: w.secrets, URLs: w.credURLs, Scrub: w.scrub,
		Judging: executor.ReplyJudging{Cooldown: policy.Cooldown, MaxRest: policy.MaxRest, Scrub: w.scrub.String},
		Ledger:  ledger, Prices: policy.Prices, Budgets: policy.TenantBudgets,
		Metrics: w.metrics, Answered: w.noteActivity, Logger: w.log.Named("gateway"), Fallbacks: w.fallbacks,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.Gateway.Listen)
	if err != nil {
		return fmt.Errorf("gateway.listen %s: %w", cfg.Gateway.Listen, err)
	}
	w.gateway = &gatewayServer{gw: gw, l: l, srv: &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: zap.NewStdLog(w.log.Named("gateway"))}}
	return nil
}

// serveGateway serves the gateway until stopGateway.
func (w *Worker) serveGateway() {
	g := w.gateway
	if g == nil {
		return
	}
	w.log.Info("serving the gateway", zap.String("addr", g.l.Addr().String()), zap.Strings("kinds", w.cfg.GatewayKinds()))
	go func() {
		if err := g.srv.Serve(g.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("the gateway's listener failed", zap.Error(err))
		}
	}()
}

// stopGateway stops taking requests and lets those being answered end
// within grace; then it cuts the rest short. It returns once every
// request has settled its lease (before the pool is closed).
func (w *Worker) stopGateway(grace time.Duration) {
	g := w.gateway
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil {
		w.log.Warn("shutdown grace over: cutting the gateway's requests short", zap.Int64("in_flight", g.gw.Stats().InFlight))
		_ = g.srv.Close()
	}
	g.gw.Wait()
}

// gatewayInfo is what the heartbeat announces of the gateway (nil when
// the worker serves none).
func (w *Worker) gatewayInfo() *queue.GatewayInfo {
	g := w.gateway
	if g == nil {
		return nil
	}
	st := g.gw.Stats()
	return &queue.GatewayInfo{Listen: g.l.Addr().String(), Requests: st.Requests, Errors: st.Errors, InFlight: st.InFlight}
}
