package worker

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The profiler is served only when worker.pprof asks for it; metrics and
// health always are; the command line (which can hold a URL's password)
// never is.
func TestHealthMuxServesPProfOnlyWhenAsked(t *testing.T) {
	metrics := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "keyfleet_slots 3\n") })
	ready := func() (bool, string) { return true, "ready" }
	cases := []struct {
		pprof bool
		want  map[string]int
	}{
		{false, map[string]int{
			"/metrics": 200, "/healthz": 200, "/readyz": 200,
			"/debug/pprof/": 404, "/debug/pprof/profile?seconds=1": 404, "/debug/pprof/trace?seconds=1": 404,
			"/debug/pprof/goroutine": 404, "/debug/pprof/cmdline": 404,
		}},
		{true, map[string]int{
			"/metrics": 200, "/healthz": 200, "/readyz": 200,
			"/debug/pprof/": 200, "/debug/pprof/goroutine": 200, "/debug/pprof/cmdline": 404,
		}},
	}
	for _, c := range cases {
		srv := httptest.NewServer(healthMux(metrics, ready, c.pprof))
		for path, want := range c.want {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pprof %v: GET %s: want %d, got %d", c.pprof, path, want, resp.StatusCode)
			}
			if path == "/debug/pprof/cmdline" && strings.Contains(string(body), "worker") {
				t.Errorf("pprof %v: the command line was served: %q", c.pprof, body)
			}
		}
		srv.Close()
	}
}
