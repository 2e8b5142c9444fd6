package e2etest

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// Helpers that tests of more than one area use: the producer's status and
// dashboard, python3, a GET with its status code.

// StatusJSON runs `producer status --json` and decodes it into the report
// it prints; the raw text is for hasStatusKeys, which checks that the
// documented keys are present.
func (f *Fleet) StatusJSON() (status.Report, string) {
	f.T.Helper()
	r := f.Producer(nil, "status", "--json")
	if r.Code != 0 {
		f.T.Fatalf("status --json:\n%s", r)
	}
	var st status.Report
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		f.T.Fatalf("status --json is not one JSON object: %v\n%s", err, r.Stdout)
	}
	return st, r.Stdout
}

var dashboardURL = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)/`)

// StartDashboard runs `producer dashboard` on a free loopback port and
// returns the process and its base URL.
func (f *Fleet) StartDashboard(name string, env []string, args ...string) (*Process, string) {
	f.T.Helper()
	saved := f.Env
	f.Env = append(append([]string(nil), f.Env...), env...)
	p := f.Start(name, Binary(f.T, "producer"), append([]string{"dashboard", "--config", f.ConfigPath, "--listen", "127.0.0.1:0"}, args...)...)
	f.Env = saved
	var base string
	testutil.WaitFor(f.T, name+" to say where it listens", 30*time.Second, func() bool {
		if m := dashboardURL.FindStringSubmatch(p.Log.String()); m != nil {
			base = m[1]
			return true
		}
		if p.Exited() {
			f.T.Fatalf("%s exited: %s", name, p.Log.String())
		}
		return false
	})
	return p, base
}

func Python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("the Python examples need python3: %v", err)
	}
	return p
}

// GetURL does a GET with a 5 s timeout and returns the status code and body.
func GetURL(url string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
