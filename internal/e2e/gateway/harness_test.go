package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The tokens the applications of these tests hold.
const (
	appToken = "gw-e2e-app-token-0001"
	opsToken = "gw-e2e-ops-token-0002"
)

// fleet is a fleet whose kinds chat (openai) and claude (anthropic) run
// on strict stand-ins, and whose workers serve the gateway.
type fleet struct {
	*e2etest.Fleet
	oa, an   *fakeapi.Server
	oaURL    string
	gateway  string // the gateway's base URL (http://host:port)
	listen   string // worker.listen of the first worker (/metrics)
	gwListen string
}

// options shape a fleet.
type options struct {
	// oaKeys are the OpenAI stand-in's keys (default: key-a and key-b,
	// no limits); credentials the pool's (default: key-a and key-b in
	// group openai, key-c in group anthropic, max_concurrent 4).
	oaKeys      []fakeapi.Key
	credentials string
	// onRequest sees every request the OpenAI stand-in gets.
	onRequest func(fakeapi.Received)
	// worker, pool: extra lines under worker: and pool:; top: YAML
	// added at the end (tenants:, ...); gateway: extra lines under
	// gateway:.
	worker, pool, top, gateway string
	// latency of the stand-ins (default 20ms).
	latency time.Duration
	// concurrency is worker.concurrency (default 4).
	concurrency int
}

var keySecrets = map[string]string{
	"key-a": "sk-gw-e2e-AAAA-1111", "key-b": "sk-gw-e2e-BBBB-2222", "key-c": "sk-ant-gw-e2e-CCCC-3333",
}

func newFleet(t *testing.T, o options) *fleet {
	t.Helper()
	if o.oaKeys == nil {
		o.oaKeys = []fakeapi.Key{{Secret: keySecrets["key-a"]}, {Secret: keySecrets["key-b"]}}
	}
	if o.credentials == "" {
		o.credentials = "- {id: key-a, secret_env: KEY_A, max_concurrent: 4, groups: [openai]}\n" +
			"- {id: key-b, secret_env: KEY_B, max_concurrent: 4, groups: [openai]}\n" +
			"- {id: key-c, secret_env: KEY_C, max_concurrent: 4, groups: [anthropic]}"
	}
	if o.latency == 0 {
		o.latency = 20 * time.Millisecond
	}
	if o.concurrency == 0 {
		o.concurrency = 4
	}
	f := &fleet{}
	var oaURL, anURL string
	f.oa, oaURL = strictAPI(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: o.oaKeys, Record: true, Latency: o.latency, OnRequest: o.onRequest})
	f.an, anURL = strictAPI(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{{Secret: keySecrets["key-c"]}}, Record: true, Latency: o.latency})
	f.oaURL = oaURL
	f.listen, f.gwListen = testutil.FreeAddr(t), testutil.FreeAddr(t)
	f.Fleet = e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: o.credentials,
		Pool:        o.pool,
		Worker:      fmt.Sprintf("concurrency: %d\nretry_backoff: [100ms]\nlisten: %s\n%s", o.concurrency, f.listen, o.worker),
		Jobs: fmt.Sprintf("kinds:\n  chat:\n    http: {provider: openai, url: %q}\n    credentials: [openai]\n"+
			"  claude:\n    http: {provider: anthropic, url: %q}\n    credentials: [anthropic]", oaURL, anURL),
		Env: []string{"KEY_A=" + keySecrets["key-a"], "KEY_B=" + keySecrets["key-b"], "KEY_C=" + keySecrets["key-c"],
			"APP_TOKEN=" + appToken, "OPS_TOKEN=" + opsToken},
	})
	f.gateway = "http://" + f.gwListen
	appendConfig(f.Fleet, fmt.Sprintf("gateway:\n  listen: %s\n  tokens:\n    - {token_env: APP_TOKEN, tenant: support}\n    - {token_env: OPS_TOKEN}\n%s%s",
		f.gwListen, e2etest.Indent(o.gateway, 2), o.top))
	return f
}

// strictAPI starts a strict stand-in behind an httptest server.
func strictAPI(t *testing.T, c fakeapi.Config) (*fakeapi.Server, string) {
	t.Helper()
	api, err := fakeapi.New(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

// appendConfig adds YAML at the end of the fleet's config file.
func appendConfig(f *e2etest.Fleet, yaml string) {
	f.T.Helper()
	if err := os.WriteFile(f.ConfigPath, []byte(f.File("keyfleet.yaml")+yaml+"\n"), 0o600); err != nil {
		f.T.Fatal(err)
	}
}

// startWorker starts a worker and waits until its gateway answers.
func (f *fleet) startWorker(name string) *e2etest.Process {
	f.T.Helper()
	p := f.StartWorker(name)
	f.waitGateway(f.gateway, p)
	return p
}

// waitGateway waits until the gateway at base answers (a 404 for /).
func (f *fleet) waitGateway(base string, p *e2etest.Process) {
	f.T.Helper()
	testutil.WaitFor(f.T, "the worker's gateway to answer", time.Minute, func() bool {
		if p.Exited() {
			f.T.Fatalf("the worker exited:\n%s", e2etest.Tail(p.Log.String(), 30))
		}
		code, _, err := e2etest.GetURL(base + "/")
		return err == nil && code == http.StatusNotFound
	})
}

// reply is what the gateway answered.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends body to url with headers (name, value, ...).
func post(t *testing.T, url, body string, headers ...string) reply {
	t.Helper()
	r := postNoFail(url, body, headers...)
	if r.status < 0 {
		t.Fatal(r.body)
	}
	return r
}

// postNoFail is post for another goroutine than the test's: an error is
// a reply of status -1 with the error as its body.
func postNoFail(url, body string, headers ...string) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return reply{status: -1, body: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{status: -1, body: err.Error()}
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// metrics reads the worker's /metrics.
func (f *fleet) metrics() string {
	f.T.Helper()
	code, body, err := e2etest.GetURL("http://" + f.listen + "/metrics")
	if err != nil || code != 200 {
		f.T.Fatalf("/metrics: %d %v", code, err)
	}
	return body
}

// metricLine finds the sample of /metrics that starts with prefix, e.g.
// `keyfleet_gateway_requests_total{kind="chat",status="200"}`, and
// returns its value ("" when there is none).
func metricLine(metrics, prefix string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, prefix+" "); ok {
			return v
		}
	}
	return ""
}

const (
	chatBody   = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"max_tokens":20}`
	claudeBody = `{"model":"claude-sonnet-4-6","max_tokens":20,"messages":[{"role":"user","content":"Say hello."}]}`
)
