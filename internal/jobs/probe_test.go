package jobs_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/secret"
)

func newProber(t *testing.T, sec jobs.Probing, timeout time.Duration) jobs.Prober {
	t.Helper()
	if !sec.HasProbe() {
		t.Fatal("the section has no probe")
	}
	p, err := sec.NewProber(jobs.Common{Scrubber: secret.NewScrubber(secret.New(testSecret))}, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The http probe is a GET of probe_url with the key as the job sends it
// (header, format and the configured headers), no body; 2xx: the key
// works. Anything else is an error naming the status, secrets scrubbed.
func TestHTTPProbe(t *testing.T) {
	t.Parallel()
	answer := make(chan int, 1)
	got := make(chan *http.Request, 1)
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r
		code := <-answer
		if code == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error": "key ` + testSecret + ` is revoked"}`))
	})
	cfg := &jobs.HTTPConfig{URL: url + "/v1/do", ProbeURL: url + "/v1/models", Header: "X-Api-Key", Format: "key={secret}",
		Headers: map[string]string{"Anthropic-Version": "2023-06-01"}}
	p := newProber(t, cfg, 5*time.Second)

	answer <- http.StatusOK
	cause, err := p.Probe(t.Context(), testCred)
	if err != nil || cause != "probe GET "+url+"/v1/models answered 200 OK" {
		t.Fatalf("a 200: want the cause, nil; got %q, %v", cause, err)
	}
	r := <-got
	if r.Method != http.MethodGet || r.URL.Path != "/v1/models" || r.Header.Get("X-Api-Key") != "key="+testSecret ||
		r.Header.Get("Anthropic-Version") != "2023-06-01" || r.ContentLength > 0 {
		t.Fatalf("probe request: %s %s %v (length %d)", r.Method, r.URL, r.Header, r.ContentLength)
	}

	for _, code := range []int{http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusFound} {
		answer <- code
		cause, err := p.Probe(t.Context(), testCred)
		<-got
		if err == nil || cause != "" {
			t.Fatalf("a %d: want an error, got cause %q", code, cause)
		}
		if !strings.Contains(err.Error(), "answered "+strconv.Itoa(code)+" ") {
			t.Errorf("a %d: the error does not name the status: %v", code, err)
		}
		noSecret(t, err)
	}
}

func TestHTTPProbeTimeout(t *testing.T) {
	t.Parallel()
	url := serve(t, hang(t, nil))
	p := newProber(t, &jobs.HTTPConfig{URL: url, ProbeURL: url + "/v1/models"}, 200*time.Millisecond)
	start := time.Now()
	if _, err := p.Probe(t.Context(), testCred); err == nil {
		t.Fatal("a probe that got no answer succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the probe took %s with a timeout of 200ms", d)
	}
}

func TestProbeSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		sec  jobs.Probing
		want string // the key of the problem, "" for none
	}{
		{"http no probe", &jobs.HTTPConfig{URL: "https://a.example/x"}, ""},
		{"http probe", &jobs.HTTPConfig{URL: "https://a.example/x", ProbeURL: "https://a.example/v1/models"}, ""},
		{"http relative", &jobs.HTTPConfig{URL: "https://a.example/x", ProbeURL: "/v1/models"}, "probe_url"},
		{"http scheme", &jobs.HTTPConfig{URL: "https://a.example/x", ProbeURL: "ftp://a.example/v1/models"}, "probe_url"},
		{"http no host", &jobs.HTTPConfig{URL: "https://a.example/x", ProbeURL: "https:///v1/models"}, "probe_url"},
		{"exec probe", &jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: []string{"./probe.sh", "x"}}, ""},
		{"exec blank", &jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: []string{" "}}, "probe_command[0]"},
		{"exec NUL", &jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: []string{"p", "a\x00b"}}, "probe_command[1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var keys []string
			switch s := c.sec.(type) {
			case *jobs.HTTPConfig:
				d := s.WithDefaults()
				for _, p := range d.Check() {
					keys = append(keys, p.Key)
				}
			case *jobs.ExecConfig:
				d := s.WithDefaults()
				for _, p := range d.Check() {
					keys = append(keys, p.Key)
				}
			}
			switch {
			case c.want == "" && len(keys) > 0:
				t.Fatalf("want no problem, got %v", keys)
			case c.want != "" && (len(keys) != 1 || keys[0] != c.want):
				t.Fatalf("want one problem at %s, got %v", c.want, keys)
			}
		})
	}
	if _, err := (&jobs.HTTPConfig{URL: "https://a.example/x"}).NewProber(jobs.Common{}, time.Second); err == nil {
		t.Error("NewProber without probe_url succeeded")
	}
	if _, err := (&jobs.ExecConfig{Command: []string{"true"}}).NewProber(jobs.Common{}, time.Second); err == nil {
		t.Error("NewProber without probe_command succeeded")
	}
	if _, err := (&jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: []string{"./no/such/probe"}}).NewProber(jobs.Common{}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "probe_command") {
		t.Errorf("NewProber with a missing program: want an error naming probe_command, got %v", err)
	}
}

// The exec probe runs probe_command as a job runs: the key in
// KEYFLEET_CREDENTIAL_ID and KEYFLEET_CREDENTIAL_SECRET, the worker's
// environment minus the secret_env variables, an empty item; exit 0: the
// key works.
func TestExecProbe(t *testing.T) {
	t.Setenv("OTHER_KEY", "sk-other-secret")
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	prog := script(t, `env > "`+out+`"
cat > /dev/null
case "$KEYFLEET_CREDENTIAL_SECRET" in
  `+testSecret+`) exit 0 ;;
esac
echo "key $KEYFLEET_CREDENTIAL_SECRET refused" >&2
exit 77`)
	cfg := &jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: []string{prog}, Env: map[string]string{"REGION": "eu"}}
	p, err := cfg.NewProber(jobs.Common{ScrubEnv: []string{"OTHER_KEY"}, Scrubber: secret.NewScrubber(secret.New(testSecret), secret.New("sk-wrong-0000"))}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cause, err := p.Probe(t.Context(), testCred)
	if err != nil || cause != "probe_command exited 0" {
		t.Fatalf("want the cause, nil; got %q, %v", cause, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := "\n" + string(b)
	for _, want := range []string{"\nKEYFLEET_CREDENTIAL_ID=key-a\n", "\nKEYFLEET_CREDENTIAL_SECRET=" + testSecret + "\n", "\nREGION=eu\n", "\nKEYFLEET_ATTEMPT=0\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("the probe's environment lacks %q:\n%s", strings.TrimSpace(want), b)
		}
	}
	if strings.Contains(env, "OTHER_KEY") {
		t.Error("the probe saw a secret_env variable")
	}

	cause, err = p.Probe(t.Context(), jobs.Credential{ID: "key-b", Secret: secret.New("sk-wrong-0000")})
	if err == nil || cause != "" {
		t.Fatalf("exit 77: want an error, got cause %q", cause)
	}
	if strings.Contains(err.Error(), "sk-wrong-0000") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the error must quote stderr scrubbed: %v", err)
	}
}

// A probe that overruns its timeout is killed with its process group.
func TestExecProbeTimeoutKillsGroup(t *testing.T) {
	cmd, pidFile := groupScript(t, "wait")
	cfg := &jobs.ExecConfig{Command: []string{"true"}, ProbeCommand: cmd}
	p := newProber(t, cfg, time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := p.Probe(ctx, testCred); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want a time-out, got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the probe took %s with a timeout of 1s", d)
	}
	waitDead(t, readPID(t, pidFile))
}
