package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/api"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// GET /api/tenants and POST /api/tenants/{name}/budget: the write needs
// the token and a JSON body; a bad budget is 400, a tenant not in the
// configuration 404, one without a configured budget 409; a live budget
// that covers the next start resumes the tenant's batches paused for it.
func TestAPITenantBudget(t *testing.T) {
	srv, q := serveWith(t, func(rs *redistest.Server, o *api.Options) {
		o.AdminToken = token
		o.Enqueue.Ledger = spend.NewLedger(rs.Client(t), "api-test")
		o.Tenants = []status.TenantSpec{{Name: "research", Weight: 2, Budget: &spend.Budget{Amount: spend.Unit, Period: spend.Day}},
			{Name: "support", Weight: 1}}
	})
	u := srv.URL
	if _, err := q.AddToBatch(t.Context(), "r1", "sleep", 1, queue.WithTenant("research")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.PauseFor(t.Context(), "r1", spend.ReasonTenantBudget, "worker-1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, method, path, body string
		auth                     bool
		code                     int
		says                     string
	}{
		{"the tenants", "GET", "/api/tenants", "", false, http.StatusOK, `"budget_source":"config"`},
		{"without the token", "POST", "/api/tenants/research/budget", `{"budget":"5/d"}`, false, http.StatusUnauthorized, "admin token"},
		{"not JSON", "POST", "/api/tenants/research/budget?budget=5/d", "", true, http.StatusUnsupportedMediaType, "JSON body"},
		{"no budget", "POST", "/api/tenants/research/budget", `{}`, true, http.StatusBadRequest, `\"budget\" is required`},
		{"a bad period", "POST", "/api/tenants/research/budget", `{"budget":"5/y"}`, true, http.StatusBadRequest, `unknown period \"y\"`},
		{"a bad amount", "POST", "/api/tenants/research/budget", `{"budget":"0/d"}`, true, http.StatusBadRequest, "more than 0"},
		{"an unknown field", "POST", "/api/tenants/research/budget", `{"budget":"5/d","x":1}`, true, http.StatusBadRequest, "unknown field"},
		{"not a tenant", "POST", "/api/tenants/marketing/budget", `{"budget":"5/d"}`, true, http.StatusNotFound, `tenant \"marketing\" is not in the configuration`},
		{"no configured budget", "POST", "/api/tenants/support/budget", `{"budget":"5/d"}`, true, http.StatusConflict, "no budget in the configuration"},
	} {
		code, body := call(t, c.method, u+c.path, c.body, c.auth)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: want %d saying %s, got %d %s", c.name, c.code, c.says, code, body)
		}
	}

	code, body := call(t, "POST", u+"/api/tenants/research/budget", `{"budget":"5/w"}`, true)
	var set struct {
		Name    string   `json:"name"`
		Budget  float64  `json:"budget"`
		Period  string   `json:"period"`
		Source  string   `json:"budget_source"`
		SetBy   string   `json:"set_by"`
		Resumed []string `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(body), &set); code != http.StatusOK || err != nil || set.Name != "research" || set.Budget != 5 ||
		set.Period != "w" || set.Source != "live" || set.SetBy != "dashboard@127.0.0.1" || len(set.Resumed) != 1 || set.Resumed[0] != "r1" {
		t.Fatalf("set 5/w: %d %s", code, body)
	}
	if b, err := q.Batch(t.Context(), "r1"); err != nil || b.State != kftype.BatchRunning {
		t.Errorf("r1 after the raise: %s %v, want running", b.State, err)
	}
	var ts []struct {
		Name   string   `json:"name"`
		Budget *float64 `json:"budget"`
		Source string   `json:"budget_source"`
	}
	if code, body = call(t, "GET", u+"/api/tenants", "", false); json.Unmarshal([]byte(body), &ts) != nil || len(ts) != 2 ||
		ts[0].Source != "live" || *ts[0].Budget != 5 || ts[1].Source != "none" || ts[1].Budget != nil {
		t.Errorf("the tenants after the change: %d %s", code, body)
	}
	if code, body = call(t, "POST", u+"/api/tenants/research/budget", `{"budget":"none"}`, true); code != http.StatusOK ||
		!strings.Contains(body, `"budget_source":"config"`) || !strings.Contains(body, `"resumed":[]`) {
		t.Errorf("none: %d %s", code, body)
	}
}
