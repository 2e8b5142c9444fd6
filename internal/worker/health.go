package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Serve serves /metrics, /healthz, /readyz and /debug/pprof/ on addr until
// ctx ends. It
// returns once the listener is up (or failed) and the bound address.
func (w *Worker) Serve(ctx context.Context, addr string) (string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(w.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ok, why := w.Ready()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(rw, why)
	})
	// Go profiles, for the operator who bound the listener (loopback by
	// default in the reference config).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("worker.listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("metrics listener", zap.Error(err))
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return l.Addr().String(), nil
}
