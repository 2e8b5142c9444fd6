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

// Serve serves /metrics, /healthz and /readyz on addr until ctx ends, and
// /debug/pprof/ only with worker.pprof set. It returns once the listener is
// up (or failed) and the bound address.
func (w *Worker) Serve(ctx context.Context, addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("worker.listen %s: %w", addr, err)
	}
	h := healthMux(promhttp.HandlerFor(w.metrics.Registry, promhttp.HandlerOpts{}), w.Ready, w.cfg.Worker.PProf)
	// A scrape is small and quick; a CPU profile (pprof) takes its 30 s.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute}
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

// healthMux routes the worker's listener. Go's profiler is there only when
// asked for (worker.pprof): whoever can scrape metrics could otherwise run
// CPU profiles and execution traces on the worker. /debug/pprof/cmdline is
// never served: a command line can hold a URL's password.
func healthMux(metrics http.Handler, ready func() (bool, string), withPProf bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ok, why := ready()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(rw, why)
	})
	if withPProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
