package producer

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

func httpDo(t *testing.T, method, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{"id":"key-a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// producer dashboard: serves /healthz and /api/status (status --json plus
// the batches, with a total written at enqueue), is read-only by default,
// needs a usable token for writes, and exits 0 on SIGTERM and SIGINT.
func TestProducerDashboard(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}`,
		Worker:      "heartbeat: 1s",
		Env:         []string{"KEY_A=sk-dashboard-e2e-secret-0001"},
	})
	f.StartWorker("w1")
	in := f.WriteInput("items.jsonl", "{\"id\":\"a\",\"ms\":5}\n{\"id\":\"b\",\"ms\":5}\n{\"id\":\"c\",\"ms\":5}\n")
	if r := f.Producer(nil, "enqueue", "--kind", "sleep", "--batch", "e2e-batch", in); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}

	d, base := f.StartDashboard("dashboard", nil)
	if code, body := httpDo(t, http.MethodGet, base+"/healthz", ""); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	var raw string
	testutil.WaitFor(t, "batch e2e-batch done on /api/status", 60*time.Second, func() bool {
		_, raw = httpDo(t, http.MethodGet, base+"/api/status", "")
		var s struct {
			Batches []struct {
				ID          string `json:"id"`
				Total, Done int
			} `json:"batches"`
		}
		return json.Unmarshal([]byte(raw), &s) == nil && len(s.Batches) == 1 && s.Batches[0].ID == "e2e-batch" &&
			s.Batches[0].Total == 3 && s.Batches[0].Done == 3
	})
	hasStatusKeys(t, raw) // the schema of status --json, unchanged
	if strings.Contains(raw, "sk-dashboard-e2e-secret-0001") {
		t.Fatal("/api/status holds a key's secret")
	}
	if code, _ := httpDo(t, http.MethodPost, base+"/api/creds/disable", "Bearer anything-at-all-here"); code != http.StatusForbidden {
		t.Errorf("a write on a read-only dashboard: want 403, got %d", code)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.WaitExit(t, 15*time.Second); code != 0 {
		t.Fatalf("SIGTERM: want exit 0, got %d\n%s", code, d.Log.String())
	}

	// A token: unset, too short, then a good one.
	for _, c := range []struct{ env, want string }{
		{"", "KF_ADMIN: the variable is unset or empty"},
		{"KF_ADMIN=short", "want at least 16"},
	} {
		env := f.Env
		if c.env != "" {
			env = append(append([]string(nil), f.Env...), c.env)
		}
		r := e2etest.RunProducer(t, env, nil, "dashboard", "--config", f.ConfigPath, "--listen", "127.0.0.1:0", "--admin-token-env", "KF_ADMIN")
		if r.Code != 2 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("token %q: want exit 2 saying %q, got\n%s", c.env, c.want, r)
		}
	}
	const token = "e2e-admin-token-0123456789"
	d, base = f.StartDashboard("dashboard-admin", []string{"KF_ADMIN=" + token}, "--admin-token-env", "KF_ADMIN")
	if code, _ := httpDo(t, http.MethodPost, base+"/api/creds/disable", ""); code != http.StatusUnauthorized {
		t.Errorf("a write without the token: want 401, got %d", code)
	}
	if code, body := httpDo(t, http.MethodPost, base+"/api/creds/disable", "Bearer "+token); code != http.StatusOK || strings.Contains(body, token) {
		t.Errorf("a write with the token: want 200 without the token in the reply, got %d %s", code, body)
	}
	d.Signal(syscall.SIGINT)
	if code := d.WaitExit(t, 15*time.Second); code != 0 {
		t.Fatalf("SIGINT: want exit 0, got %d\n%s", code, d.Log.String())
	}
	if strings.Contains(d.Log.String(), token) {
		t.Error("the dashboard logged the admin token")
	}
}
