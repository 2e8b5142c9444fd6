package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/connect"
	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/internal/testutil/tlstest"
)

// Authentication and TLS. For NATS (user/password, token, TLS, mutual TLS)
// and Redis (requirepass, an ACL user, TLS with rediss://, mutual TLS with a
// password), each case runs a small guarded batch with the right
// credentials, then starts a worker and `producer status` with each wrong
// one (password, token, CA, client certificate, none at all): both must
// exit 3 within a few seconds with one last line that names the server,
// and no output may hold a password or token, right or wrong.
func TestReliabilityAuthAndTLS(t *testing.T) {
	pki := tlstest.New(t)
	for _, c := range authCases(pki) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runAuthCase(t, c)
		})
	}
}

// authCase is one way of securing a server: how to start it, the config
// section that works, and the ones that must not.
type authCase struct {
	name string
	// start starts the server and returns the setup.
	start func(t *testing.T) authSetup
}

type authSetup struct {
	section string // "nats" or "redis"
	right   string // YAML under section:
	// natsURL and natsOpts: how the test itself connects (NATS cases).
	natsURL  string
	natsOpts []nats.Option
	wrong    []wrongAuth
	// secrets must appear in no output: passwords and tokens, right and
	// wrong.
	secrets []string
}

type wrongAuth struct {
	label string
	yaml  string // YAML under the section
	url   string // the URL in it, for the expected "<server> at <redacted URL>"
}

const (
	natsUser     = "kf-user"
	natsPassword = "natsPw-3b1f9d0c"
	natsToken    = "natsTok-5d2a77e1"
	redisPass    = "redisPw-9c4e2a71"
	redisACLUser = "kfworker"
	redisACLPass = "aclPw-2e8b61f4"
	wrongPass    = "wrongPw-88c2e1aa"
	wrongToken   = "wrongTok-19fe33b0"
)

func authCases(pki *tlstest.PKI) []authCase {
	natsSetup := func(url string, right string, opts []nats.Option, wrong []wrongAuth, secrets ...string) authSetup {
		return authSetup{section: "nats", right: right, natsURL: url, natsOpts: opts, wrong: wrong, secrets: secrets}
	}
	tlsYAML := func(url, ca, cert, key string) string {
		y := fmt.Sprintf("url: %s\ntls:\n  ca_file: %s", url, ca)
		if cert != "" {
			y += fmt.Sprintf("\n  cert_file: %s\n  key_file: %s", cert, key)
		}
		return y
	}
	urlYAML := func(url string) string { return "url: " + url }
	wrongURL := func(label, url string) wrongAuth { return wrongAuth{label: label, yaml: urlYAML(url), url: url} }

	return []authCase{
		{"NATS user and password", func(t *testing.T) authSetup {
			s := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = natsUser, natsPassword })
			hp := strings.TrimPrefix(s.URL(), "nats://")
			right := fmt.Sprintf("nats://%s:%s@%s", natsUser, natsPassword, hp)
			return natsSetup(right, urlYAML(right), nil, []wrongAuth{
				wrongURL("wrong password", fmt.Sprintf("nats://%s:%s@%s", natsUser, wrongPass, hp)),
				wrongURL("no credentials", s.URL()),
			}, natsPassword, wrongPass)
		}},
		{"NATS token", func(t *testing.T) authSetup {
			s := natstest.Start(t, func(o *server.Options) { o.Authorization = natsToken })
			hp := strings.TrimPrefix(s.URL(), "nats://")
			right := fmt.Sprintf("nats://%s@%s", natsToken, hp)
			return natsSetup(right, urlYAML(right), nil, []wrongAuth{
				wrongURL("wrong token", fmt.Sprintf("nats://%s@%s", wrongToken, hp)),
			}, natsToken, wrongToken)
		}},
		{"NATS TLS", func(t *testing.T) authSetup {
			s := natstest.Start(t, func(o *server.Options) { o.TLS, o.TLSConfig = true, pki.ServerConfig(t, false) })
			url := "tls://" + strings.TrimPrefix(s.URL(), "nats://")
			return natsSetup(url, tlsYAML(url, pki.CAFile, "", ""), []nats.Option{nats.Secure(pki.ClientConfig(t, false))},
				[]wrongAuth{
					{label: "wrong CA", yaml: tlsYAML(url, pki.OtherCAFile, "", ""), url: url},
					wrongURL("no CA (system roots)", url),
				})
		}},
		{"NATS mutual TLS and password", func(t *testing.T) authSetup {
			s := natstest.Start(t, func(o *server.Options) {
				o.TLS, o.TLSVerify, o.TLSConfig = true, true, pki.ServerConfig(t, true)
				o.Username, o.Password = natsUser, natsPassword
			})
			hp := strings.TrimPrefix(s.URL(), "nats://")
			url := fmt.Sprintf("tls://%s:%s@%s", natsUser, natsPassword, hp)
			return natsSetup(url, tlsYAML(url, pki.CAFile, pki.ClientCert, pki.ClientKey),
				[]nats.Option{nats.Secure(pki.ClientConfig(t, true))},
				[]wrongAuth{
					{label: "client certificate of another CA", yaml: tlsYAML(url, pki.CAFile, pki.OtherClientCert, pki.OtherClientKey), url: url},
					{label: "no client certificate", yaml: tlsYAML(url, pki.CAFile, "", ""), url: url},
				}, natsPassword)
		}},
		{"Redis requirepass", func(t *testing.T) authSetup {
			s := redistest.Start(t, redistest.WithArgs("--requirepass", redisPass))
			return authSetup{section: "redis", right: urlYAML(s.URL()), secrets: []string{redisPass, wrongPass, "c0mma9", "Pw-c0f"}, wrong: []wrongAuth{
				wrongURL("wrong password", fmt.Sprintf("redis://:%s@%s/0", wrongPass, s.Addr())),
				// A comma must not cut the password in two for the redaction.
				wrongURL("wrong password with a comma", fmt.Sprintf("redis://:c0mma9,Pw-c0f@%s/0", s.Addr())),
				wrongURL("no password", fmt.Sprintf("redis://%s/0", s.Addr())),
			}}
		}},
		{"Redis ACL user (least privilege)", func(t *testing.T) authSetup {
			s := redistest.Start(t, redistest.WithArgs("--requirepass", redisPass))
			// Only keyfleet's keys and channels, no dangerous commands.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Client(t).Do(ctx, "ACL", "SETUSER", redisACLUser, "on", ">"+redisACLPass,
				"~keyfleet:*", "&keyfleet:*", "+@all", "-@dangerous").Err(); err != nil {
				t.Fatal(err)
			}
			right := fmt.Sprintf("redis://%s:%s@%s/0", redisACLUser, redisACLPass, s.Addr())
			return authSetup{section: "redis", right: urlYAML(right), secrets: []string{redisACLPass, redisPass, wrongPass}, wrong: []wrongAuth{
				wrongURL("wrong password", fmt.Sprintf("redis://%s:%s@%s/0", redisACLUser, wrongPass, s.Addr())),
				wrongURL("unknown user", fmt.Sprintf("redis://nobody:%s@%s/0", redisACLPass, s.Addr())),
			}}
		}},
		{"Redis TLS", func(t *testing.T) authSetup {
			s := redistest.StartTLS(t, redistest.TLSFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CAFile})
			url := s.TLSURL()
			return authSetup{section: "redis", right: tlsYAML(url, pki.CAFile, "", ""), wrong: []wrongAuth{
				{label: "wrong CA", yaml: tlsYAML(url, pki.OtherCAFile, "", ""), url: url},
				wrongURL("plain redis:// to a TLS port", strings.Replace(url, "rediss://", "redis://", 1)),
			}}
		}},
		{"Redis mutual TLS and password", func(t *testing.T) authSetup {
			s := redistest.StartTLS(t, redistest.TLSFiles{
				CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CAFile,
				ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, AuthClients: "yes",
			}, redistest.WithArgs("--requirepass", redisPass))
			url := s.TLSURL()
			wrongPw := fmt.Sprintf("rediss://:%s@%s/0", wrongPass, s.Addr())
			return authSetup{section: "redis", right: tlsYAML(url, pki.CAFile, pki.ClientCert, pki.ClientKey),
				secrets: []string{redisPass, wrongPass}, wrong: []wrongAuth{
					{label: "no client certificate", yaml: tlsYAML(url, pki.CAFile, "", ""), url: url},
					{label: "client certificate of another CA", yaml: tlsYAML(url, pki.CAFile, pki.OtherClientCert, pki.OtherClientKey), url: url},
					{label: "wrong password", yaml: tlsYAML(wrongPw, pki.CAFile, pki.ClientCert, pki.ClientKey), url: wrongPw},
				}}
		}},
	}
}

func runAuthCase(t *testing.T, c authCase) {
	s := c.start(t)
	f := e2etest.GuardedFleet(t, "concurrency: 2", "")
	if s.section == "nats" {
		switchNATS(f, s.right, s.natsURL, s.natsOpts...)
	} else {
		writeConfig(f, replaceSection(t, readConfig(f), "redis", s.right))
	}

	// The right credentials: a batch runs.
	n := e2etest.ShortOrFull(20, 200)
	start := time.Now()
	ids := f.Publish("auth", "exec", n, e2etest.ItemJSON)
	w := f.StartWorker("w1")
	results := f.WaitResults("auth", n, time.Minute)
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, w)
	if strings.Contains(w.Log.String(), "NOPERM") {
		t.Errorf("the worker was refused a command:\n%s", e2etest.Tail(w.Log.String(), 20))
	}
	// The operator's commands work with the same settings.
	if r := f.Producer(nil, "status", "--json"); r.Code != 0 {
		t.Errorf("producer status with the right settings:\n%s", r)
	} else if !json.Valid([]byte(r.Stdout)) {
		t.Errorf("producer status --json is not JSON:\n%s", r.Stdout)
	}

	// Each wrong one: a quick exit 3, one line naming the server.
	var notes []string
	for i, wr := range s.wrong {
		cfg := filepath.Join(f.Dir, fmt.Sprintf("wrong-%d.yaml", i))
		if err := os.WriteFile(cfg, []byte(replaceSection(t, readConfig(f), s.section, wr.yaml)), 0o600); err != nil {
			t.Fatal(err)
		}
		server := map[string]string{"nats": "NATS", "redis": "Redis"}[s.section]
		want := server + " at " + connect.Redact(wr.url)
		wStart := time.Now()
		p := f.Start(fmt.Sprintf("worker (%s)", wr.label), e2etest.Binary(t, "worker"), "--config", cfg, "--id", fmt.Sprintf("bad-%d", i))
		code := p.WaitExit(t, 30*time.Second)
		wTook := time.Since(wStart)
		checkRefusal(t, "worker", wr.label, code, p.Log.String(), want, s.secrets)
		r := e2etest.RunProducer(t, f.Env, nil, "status", "--config", cfg)
		checkRefusal(t, "producer", wr.label, r.Code, r.Stdout+r.Stderr, want, s.secrets)
		notes = append(notes, fmt.Sprintf("%s: exit 3 in %s/%s", wr.label, wTook.Round(100*time.Millisecond), r.Took.Round(100*time.Millisecond)))
		t.Logf("%s: worker %s, producer %s: %s", wr.label, wTook.Round(time.Millisecond), r.Took.Round(time.Millisecond),
			lastLine(r.Stderr))
	}
	// The right credentials appear in no output either.
	for _, sec := range s.secrets {
		if strings.Contains(f.Logs(), sec) {
			t.Errorf("a password or token appears in a worker's output")
		}
	}
	f.Account("Auth/TLS: "+c.name, ids, results, took, e2etest.Bounds{}, "wrong → "+strings.Join(notes, "; "))
}

// checkRefusal checks one refused start: exit 3, a last line naming the
// server, no password or token anywhere, no panic or race.
func checkRefusal(t *testing.T, who, label string, code int, out, want string, secrets []string) {
	t.Helper()
	last := lastLine(out)
	if code != 3 {
		t.Errorf("%s with %s: exit %d, want 3; output:\n%s", who, label, code, e2etest.Tail(out, 15))
	}
	if !strings.HasPrefix(last, who+": ") || !strings.Contains(last, want) {
		t.Errorf("%s with %s: the last line does not name %q:\n%s", who, label, want, last)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s with %s printed a password or token (%s…):\n%s", who, label, s[:6], e2etest.Tail(out, 15))
		}
	}
	if strings.Contains(out, "panic:") || strings.Contains(out, "DATA RACE") {
		t.Errorf("%s with %s panicked or raced:\n%s", who, label, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func readConfig(f *e2etest.Fleet) string {
	f.T.Helper()
	b, err := os.ReadFile(f.ConfigPath)
	if err != nil {
		f.T.Fatal(err)
	}
	return string(b)
}

func writeConfig(f *e2etest.Fleet, cfg string) {
	f.T.Helper()
	if err := os.WriteFile(f.ConfigPath, []byte(cfg), 0o600); err != nil {
		f.T.Fatal(err)
	}
}

// replaceSection replaces a top-level section of a config file (its line
// and the indented lines under it) with the given YAML lines.
func replaceSection(t *testing.T, cfg, section, yaml string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(section) + `:\n(?:[ \t]+.*\n)*`)
	if !re.MatchString(cfg) {
		t.Fatalf("no %s: section in the config:\n%s", section, cfg)
	}
	repl := section + ":\n" + e2etest.Indent(yaml, 2)
	return re.ReplaceAllLiteralString(cfg, repl)
}

// switchNATS points the fleet (its config and the test's own connection
// and queue) at another NATS server.
func switchNATS(f *e2etest.Fleet, yaml, url string, opts ...nats.Option) {
	f.T.Helper()
	writeConfig(f, replaceSection(f.T, readConfig(f), "nats", yaml))
	nc := natstest.Connect(f.T, url, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, nc, queue.Config{Stream: "KF"})
	if err != nil {
		f.T.Fatal(err)
	}
	f.Conn, f.Queue = nc, q
	f.AttachLanes()
}
