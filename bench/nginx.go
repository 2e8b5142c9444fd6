package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// Scenario 12b: a real nginx in front of the API, limiting each key with
// limit_req (rate=20r/s, no burst: a leaky bucket that answers anything
// faster with a bare 429, no Retry-After, as limit_req_status 429 does),
// keyed on the Authorization header. Real worker processes (2 × 4 slots,
// http kind) and 4 keys of max_concurrent 1, limits not told: the pool
// learns a pace from the bare 429s. Each request takes 10 ms behind
// nginx (internal/fakeapi). The run lasts k × 10 s (3; 1 with -quick)
// from the first request.
//
// efficiency: the 200 answers in [first request, first request + k ×
// 10 s) ÷ what limit_req allows there (4 keys × 20/s; its first request
// per key is admitted at once). 429s per 1,000 requests: nginx's 429s ÷
// every request that reached nginx (its access log). AWS SDK adaptive
// retry (a client-side token bucket that cuts its rate by β = 0.7 on a
// throttle and grows it back on a cubic curve) is the anchor the issue
// names; its figures are not measured here.
var nginxScenario = &scenario{
	name:  "nginx",
	title: "12b. nginx limit_req (rate=20r/s per key, bare 429s), limits not told",
	figures: []figSpec{
		{id: "per1000", name: "(a) per key: 429s per 1,000 requests", unit: "per 1,000", goal: atMost(50)},
		{id: "efficiency", name: "(a) 200s ÷ what limit_req allows (4 keys × 20/s)", unit: "fraction", goal: atLeast(0.85)},
		{id: "converge", name: "(a) time to converge: until the 429 share of every later second stays under 5%", unit: "s"},
		{id: "s_per1000", name: "(b) one limit for every key (limit_req per client, 80r/s): 429s per 1,000 requests", unit: "per 1,000", goal: atMost(50)},
		{id: "s_efficiency", name: "(b) 200s ÷ what limit_req allows (80/s)", unit: "fraction"},
		{id: "a_per1000", name: "(c) as (b), the keys declared one account (no limits told): 429s per 1,000 requests", unit: "per 1,000", goal: atMost(50)},
		{id: "a_efficiency", name: "(c) 200s ÷ what limit_req allows (80/s)", unit: "fraction", goal: atLeast(0.85)},
	},
	run: runNginx,
}

const (
	nginxKeys  = 4
	nginxRate  = 20 // per second per key
	nginxSlots = 4
)

func runNginx(ctx context.Context, e *env, r runInfo) (*sample, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return nil, fmt.Errorf("bench: scenario nginx needs nginx (apt-get install nginx): %w", err)
	}
	smp := newSample()
	for _, v := range []struct {
		pfx, zoneKey string
		rate         int
		account      bool
	}{
		{"", "$http_authorization", nginxRate, false},
		{"s_", "$binary_remote_addr", nginxRate * nginxKeys, false},
		{"a_", "$binary_remote_addr", nginxRate * nginxKeys, true},
	} {
		per1000, eff, converge, use, err := runNginxVariant(ctx, e, r, bin, v.zoneKey, v.rate, v.account)
		if err != nil {
			return nil, fmt.Errorf("limit_req per %s: %w", v.zoneKey, err)
		}
		smp.cpu = append(smp.cpu, use)
		smp.values[v.pfx+"per1000"], smp.values[v.pfx+"efficiency"] = per1000, eff
		if v.pfx == "" {
			smp.values["converge"] = converge
		}
	}
	return smp, nil
}

// runNginxVariant runs one fleet behind nginx limiting by zoneKey (the
// keys' Authorization header: a limit per key; the client's address: one
// limit for every key) at rate per second.
func runNginxVariant(ctx context.Context, e *env, r runInfo, bin, zoneKey string, rate int, account bool) (float64, float64, float64, CPUUse, error) {
	k := pick(r.quick, 3, 1)
	window := time.Duration(k) * 10 * time.Second
	ids := credIDs("n", nginxKeys)
	keys := make([]fakeapi.Key, len(ids))
	api, err := startAPI(fakeapi.Config{Keys: keys, Latency: 10 * time.Millisecond}, ids)
	if err != nil {
		return 0, 0, 0, CPUUse{}, err
	}
	defer api.close()
	ng, err := startNginx(ctx, bin, filepath.Join(e.dir, "nginx-"+e.uniq("ng")), strings.TrimSuffix(api.url, "/v1/bench"), zoneKey, rate)
	if err != nil {
		return 0, 0, 0, CPUUse{}, err
	}
	defer ng.stop()
	spec := fleetSpec{concurrency: nginxSlots, httpURL: ng.url + "/v1/bench"}
	for _, id := range ids {
		c := credSpec{id: id, max: 1}
		if account {
			c.account = "behind-nginx"
		}
		spec.creds = append(spec.creds, c)
	}
	if account {
		spec.accounts = []accountSpec{{id: "behind-nginx"}}
	}
	n := int(float64(nginxKeys*nginxRate)*window.Seconds()) * 2
	var t0 time.Time
	stop := api.windowFromFirst(window, &t0)
	use, _, err := e.runHTTPFleet(ctx, "nginx", spec, n, 2, "keyfleet: 2 workers behind nginx limit_req, no limits", func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q}`, id)
	}, stop)
	if err != nil {
		return 0, 0, 0, CPUUse{}, err
	}
	log, err := ng.accessLog()
	if err != nil {
		return 0, 0, 0, CPUUse{}, err
	}
	var oks, all, limited float64
	var ev []apiEvent
	for _, a := range log {
		all++
		if a.status == http.StatusTooManyRequests {
			limited++
		}
		if a.status == http.StatusOK && !a.at.Before(t0.Add(-time.Second)) && a.at.Before(t0.Add(window)) {
			oks++
		}
		ev = append(ev, apiEvent{at: a.at, status: a.status})
	}
	if all == 0 {
		return 0, 0, 0, CPUUse{}, errors.New("bench: nginx logged no request")
	}
	allowed := float64(nginxKeys) * (1 + nginxRate*window.Seconds())
	return 1000 * limited / all, oks / allowed, convergence(ev, 0.05).Seconds(), use, nil
}

// nginxServer is an nginx process serving one bench run.
type nginxServer struct {
	cmd *exec.Cmd
	dir string
	url string
}

// startNginx runs nginx in the foreground with a configuration of its
// own in dir: limit_req per zoneKey at rate per second,
// no burst, status 429, proxying to upstream; its access log holds each
// request's time (ms) and status.
func startNginx(ctx context.Context, bin, dir, upstream, zoneKey string, rate int) (*nginxServer, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	conf := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  log_format bench '$msec $status';
  limit_req_zone %[5]s zone=keys:1m rate=%[2]dr/s;
  upstream api { server %[3]s; keepalive 32; }
  server {
    listen 127.0.0.1:%[4]d;
    access_log %[1]s/access.log bench;
    location / {
      limit_req zone=keys;
      limit_req_status 429;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://api;
    }
  }
}
`, dir, rate, strings.TrimPrefix(upstream, "http://"), port, zoneKey)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: nginx: %w", err)
	}
	ng := &nginxServer{cmd: cmd, dir: dir, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return ng, nil
		}
		if time.Now().After(deadline) {
			ng.stop()
			return nil, fmt.Errorf("bench: nginx did not listen within 10s: %w", err)
		}
		if err := ctxsleep.Sleep(ctx, 20*time.Millisecond); err != nil {
			ng.stop()
			return nil, err
		}
	}
}

func (n *nginxServer) stop() {
	if n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Kill()
			<-done
		}
	}
}

// nginxHit is one line of the access log.
type nginxHit struct {
	at     time.Time
	status int
}

func (n *nginxServer) accessLog() ([]nginxHit, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "access.log"))
	if err != nil {
		return nil, fmt.Errorf("bench: nginx's access log: %w", err)
	}
	var out []nginxHit
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var sec float64
		var status int
		if _, err := fmt.Sscanf(line, "%f %d", &sec, &status); err != nil {
			continue
		}
		out = append(out, nginxHit{at: time.UnixMilli(int64(sec * 1000)), status: status})
	}
	return out, nil
}
