// Package deploy_test checks the deployment files: compose.yaml, the
// Dockerfile, .dockerignore, config/compose.yaml and deploy/kubernetes/*.yaml.
//
// Nothing here runs Docker or Kubernetes. The files are parsed, checked
// against each other (the config they load, the ports they probe, the
// secrets they wire) and scanned for secrets written inline.
package deploy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/status"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// minStopMargin is how much longer than worker.shutdown_grace the container
// runtime must wait before SIGKILL: time to nak, release leases and flush.
const minStopMargin = 5 * time.Second

// ---------------------------------------------------------------------------
// compose.yaml

// stringList is a compose field given as one string or a list of strings
// (command, entrypoint, healthcheck test).
type stringList []string

func (s *stringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = strings.Fields(n.Value)
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*s = l
		return nil
	}
	return fmt.Errorf("line %d: want a string or a list of strings", n.Line)
}

// envMap is a compose environment, given as a map or a list of NAME=VALUE.
type envMap map[string]string

func (e *envMap) UnmarshalYAML(n *yaml.Node) error {
	m := envMap{}
	switch n.Kind {
	case yaml.MappingNode:
		var raw map[string]*string
		if err := n.Decode(&raw); err != nil {
			return err
		}
		for k, v := range raw {
			if v != nil {
				m[k] = *v
			} else {
				m[k] = ""
			}
		}
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	default:
		return fmt.Errorf("line %d: want a map or a list of NAME=VALUE", n.Line)
	}
	*e = m
	return nil
}

// composeMount is a volume or bind mount in short ("src:dst:ro") or long
// syntax.
type composeMount struct {
	Source   string `yaml:"source"`
	Target   string `yaml:"target"`
	ReadOnly bool   `yaml:"read_only"`
}

func (m *composeMount) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		type plain composeMount
		return n.Decode((*plain)(m))
	}
	parts := strings.Split(n.Value, ":")
	switch len(parts) {
	case 1:
		m.Target = parts[0]
	case 2, 3:
		m.Source, m.Target = parts[0], parts[1]
		if len(parts) == 3 {
			m.ReadOnly = slices.Contains(strings.Split(parts[2], ","), "ro")
		}
	default:
		return fmt.Errorf("line %d: cannot read the mount %q", n.Line, n.Value)
	}
	return nil
}

// composeSecretRef is a service's use of a top-level secret, short or long.
type composeSecretRef struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (r *composeSecretRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		r.Source = n.Value
		return nil
	}
	type plain composeSecretRef
	return n.Decode((*plain)(r))
}

// path is where the secret appears in the container.
func (r composeSecretRef) path() string {
	switch {
	case r.Target == "":
		return "/run/secrets/" + r.Source
	case strings.HasPrefix(r.Target, "/"):
		return r.Target
	}
	return "/run/secrets/" + r.Target
}

type composeService struct {
	Image         string             `yaml:"image"`
	Build         any                `yaml:"build"`
	Command       stringList         `yaml:"command"`
	Entrypoint    stringList         `yaml:"entrypoint"`
	Environment   envMap             `yaml:"environment"`
	ContainerName string             `yaml:"container_name"`
	Ports         []any              `yaml:"ports"`
	Expose        []any              `yaml:"expose"`
	Profiles      []string           `yaml:"profiles"`
	Volumes       []composeMount     `yaml:"volumes"`
	Secrets       []composeSecretRef `yaml:"secrets"`
	DependsOn     map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	Healthcheck     *struct {
		Test stringList `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]struct {
		File        string `yaml:"file"`
		Environment string `yaml:"environment"`
	} `yaml:"secrets"`
	Volumes map[string]any `yaml:"volumes"`
}

func loadCompose(t *testing.T) (composeFile, *yaml.Node) {
	t.Helper()
	data := readFile(t, "compose.yaml")
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c, &doc
}

func TestComposeServices(t *testing.T) {
	c, _ := loadCompose(t)
	for _, name := range []string{"nats", "redis", "worker", "producer"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml: no service %q", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("images pinned", func(t *testing.T) {
		for name, want := range map[string]string{"nats": "nats", "redis": "redis"} {
			s := c.Services[name]
			repo, tag := splitImage(s.Image)
			if repo != want {
				t.Errorf("service %s: image %q, want the official %s image", name, s.Image, want)
			}
			if !pinnedTag(tag) {
				t.Errorf("service %s: image %q is not pinned to a major version (want e.g. %s:2.15-alpine, not latest)", name, s.Image, want)
			}
		}
		if _, tag := splitImage(c.Services["redis"].Image); !strings.HasPrefix(tag, "7") {
			t.Errorf("service redis: image %q, want Redis 7", c.Services["redis"].Image)
		}
		// Services that are not built here must name a pinned image.
		for name, s := range c.Services {
			if s.Build != nil {
				continue
			}
			if _, tag := splitImage(s.Image); !pinnedTag(tag) {
				t.Errorf("service %s: image %q is not pinned", name, s.Image)
			}
		}
	})

	t.Run("nats", func(t *testing.T) {
		s := c.Services["nats"]
		args := s.Command
		if !slices.Contains(args, "-js") && !slices.Contains(args, "--jetstream") {
			t.Errorf("nats command %q: JetStream is off (want -js)", args)
		}
		if v := flagValue(args, "-m", "--http_port"); v != "8222" {
			t.Errorf("nats command %q: monitoring port %q, want -m 8222", args, v)
		}
		store := flagValue(args, "-sd", "--store_dir")
		if store == "" {
			t.Errorf("nats command %q: no JetStream store dir (-sd)", args)
		} else if !slices.ContainsFunc(s.Volumes, func(m composeMount) bool { return m.Target == store && m.Source != "" }) {
			t.Errorf("nats: store dir %s is not on a volume", store)
		}
		if !mentionsPort(s.Ports, "8222") && !mentionsPort(s.Expose, "8222") {
			t.Errorf("nats: monitoring port 8222 neither published nor exposed")
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("nats: no healthcheck")
		} else if !strings.Contains(strings.Join(s.Healthcheck.Test, " "), ":8222/") {
			t.Errorf("nats healthcheck %q does not use the monitoring port 8222", s.Healthcheck.Test)
		}
	})

	t.Run("redis", func(t *testing.T) {
		s := c.Services["redis"]
		if s.Healthcheck == nil {
			t.Fatalf("redis: no healthcheck")
		}
		if test := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(test, "redis-cli") || !strings.Contains(test, "ping") {
			t.Errorf("redis healthcheck %q, want redis-cli ping", test)
		}
	})

	t.Run("worker scales", func(t *testing.T) {
		s := c.Services["worker"]
		if s.Build == nil {
			t.Errorf("worker: no build (want build: . from the Dockerfile)")
		}
		if s.ContainerName != "" {
			t.Errorf("worker: container_name %q prevents --scale worker=N", s.ContainerName)
		}
		if len(s.Ports) > 0 {
			t.Errorf("worker: published ports %v clash under --scale worker=N; use expose", s.Ports)
		}
		if len(s.Command) == 0 || s.Command[0] != "worker" {
			t.Errorf("worker: command %q, want it to start with worker", s.Command)
		}
		for _, dep := range []string{"nats", "redis"} {
			if d, ok := s.DependsOn[dep]; !ok || d.Condition != "service_healthy" {
				t.Errorf("worker: want depends_on %s with condition service_healthy", dep)
			}
		}
		for _, v := range []string{config.EnvNATSURL, config.EnvRedisURL} {
			if _, ok := s.Environment[v]; !ok {
				t.Errorf("worker: environment lacks %s", v)
			}
		}
		checkServiceURL(t, c, "worker "+config.EnvNATSURL, s.Environment[config.EnvNATSURL], "nats")
		checkServiceURL(t, c, "worker "+config.EnvRedisURL, s.Environment[config.EnvRedisURL], "redis")
	})

	t.Run("producer tool", func(t *testing.T) {
		s := c.Services["producer"]
		if !slices.Contains(s.Profiles, "tools") {
			t.Errorf("producer: profiles %q, want tools (started only by docker compose run)", s.Profiles)
		}
		if prog := mainProgram(s.Entrypoint); prog != "producer" {
			t.Errorf("producer: entrypoint %q, want producer", s.Entrypoint)
		}
		if w := c.Services["worker"]; s.Image != w.Image {
			t.Errorf("producer: image %q, want the worker's %q", s.Image, w.Image)
		}
		if !slices.ContainsFunc(s.Volumes, func(m composeMount) bool { return m.Target == "/data" && m.Source != "" }) {
			t.Errorf("producer: no host directory mounted at /data for item files")
		}
		if s.ContainerName != "" {
			t.Errorf("producer: container_name %q blocks two runs at once", s.ContainerName)
		}
	})
}

// TestComposeWorkerConfig loads the config the worker is given, exactly as
// the container would: the file mounted at its --config path, with the
// service's environment.
func TestComposeWorkerConfig(t *testing.T) {
	c, _ := loadCompose(t)
	w, ok := c.Services["worker"]
	if !ok {
		t.Fatal("compose.yaml: no service worker")
	}
	cfg, hostPath := composeServiceConfig(t, c, "worker")
	t.Logf("worker config: %s", hostPath)

	if _, ok := c.Services["producer"]; ok {
		if _, ph := composeServiceConfig(t, c, "producer"); ph != hostPath {
			t.Errorf("producer reads %s, the worker %s: want the same config", ph, hostPath)
		}
	}

	t.Run("stop grace", func(t *testing.T) {
		if w.StopGracePeriod == "" {
			t.Fatalf("worker: no stop_grace_period; Docker's default 10s is below worker.shutdown_grace %s", cfg.Worker.ShutdownGrace)
		}
		d, err := time.ParseDuration(w.StopGracePeriod)
		if err != nil {
			t.Fatalf("worker: stop_grace_period %q: %v", w.StopGracePeriod, err)
		}
		if least := cfg.Worker.ShutdownGrace + minStopMargin; d < least {
			t.Errorf("worker: stop_grace_period %s, want at least worker.shutdown_grace %s + %s", d, cfg.Worker.ShutdownGrace, minStopMargin)
		}
	})

	t.Run("listen and healthcheck", func(t *testing.T) {
		host, port := listenHostPort(t, cfg.Worker.Listen)
		if isLoopback(host) {
			t.Errorf("worker.listen %q is loopback-only inside the container; want 0.0.0.0:PORT", cfg.Worker.Listen)
		}
		if cfg.Worker.PProf {
			t.Errorf("worker.pprof is on with worker.listen %q reachable by other containers: anyone there could run profiles", cfg.Worker.Listen)
		}
		if w.Healthcheck == nil {
			t.Fatalf("worker: no healthcheck")
		}
		test := strings.Join(w.Healthcheck.Test, " ")
		if !strings.Contains(test, ":"+port+"/readyz") && !strings.Contains(test, ":"+port+"/healthz") {
			t.Errorf("worker healthcheck %q does not probe /readyz or /healthz on worker.listen's port %s", test, port)
		}
		if !mentionsPort(w.Expose, port) {
			t.Errorf("worker: port %s (worker.listen) not exposed", port)
		}
	})

	t.Run("secrets wired", func(t *testing.T) {
		var envStyle, fileStyle int
		for _, cr := range cfg.Pool.Credentials {
			switch {
			case cr.SecretEnv != "":
				envStyle++
				v, ok := w.Environment[cr.SecretEnv]
				if !ok {
					t.Errorf("credential %s: secret_env %s is not in the worker's environment", cr.ID, cr.SecretEnv)
					continue
				}
				if _, ok := interpolationRef(v); !ok {
					t.Errorf("credential %s: %s must come from the host as ${...}, not be written in compose.yaml", cr.ID, cr.SecretEnv)
				}
			case cr.SecretFile != "":
				fileStyle++
				i := slices.IndexFunc(w.Secrets, func(r composeSecretRef) bool { return r.path() == cr.SecretFile })
				if i < 0 {
					t.Errorf("credential %s: no compose secret of the worker is mounted at secret_file %s", cr.ID, cr.SecretFile)
					continue
				}
				src := w.Secrets[i].Source
				top, ok := c.Secrets[src]
				switch {
				case !ok:
					t.Errorf("credential %s: the worker uses secret %q, which compose.yaml does not define", cr.ID, src)
				case top.File == "" && top.Environment == "":
					t.Errorf("secret %s: want file: (a host file) or environment:", src)
				case top.File != "":
					checkIgnored(t, top.File)
				}
			}
		}
		if envStyle == 0 || fileStyle == 0 {
			t.Errorf("want one credential given as an environment variable and one as a file; got %d and %d", envStyle, fileStyle)
		}
	})
}

// composeServiceConfig finds the config file a service's command (or
// KEYFLEET_CONFIG) names, maps it to the host file mounted there, and loads
// it with the service's environment.
func composeServiceConfig(t *testing.T, c composeFile, name string) (*config.Config, string) {
	t.Helper()
	s := c.Services[name]
	inContainer := flagValue(s.Command, "--config")
	if inContainer == "" {
		inContainer = s.Environment[config.EnvConfig]
	}
	if inContainer == "" {
		t.Fatalf("service %s: neither --config nor %s names a config file", name, config.EnvConfig)
	}
	i := slices.IndexFunc(s.Volumes, func(m composeMount) bool { return m.Target == inContainer })
	if i < 0 {
		t.Fatalf("service %s: nothing is mounted at its config path %s", name, inContainer)
	}
	m := s.Volumes[i]
	if !m.ReadOnly {
		t.Errorf("service %s: the config mount %s is not read-only (:ro)", name, m.Target)
	}
	if !strings.HasPrefix(m.Source, "./") {
		t.Fatalf("service %s: config mounted from %q, want a file of the repository (./...)", name, m.Source)
	}
	hostPath := filepath.Join(root, filepath.FromSlash(m.Source))
	getenv := func(k string) string {
		if k == config.EnvConfig {
			return ""
		}
		return expandForTest(s.Environment[k])
	}
	cfg, err := config.Load(hostPath, getenv)
	if err != nil {
		t.Fatalf("service %s: config.Load(%s): %v", name, m.Source, err)
	}
	return cfg, hostPath
}

// checkServiceURL checks that a server URL names a compose service.
func checkServiceURL(t *testing.T, c composeFile, what, raw, service string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Errorf("%s: %q: %v", what, raw, err)
		return
	}
	if u.Hostname() != service {
		t.Errorf("%s = %q, want the compose service %s", what, raw, service)
	}
	if _, ok := c.Services[u.Hostname()]; !ok {
		t.Errorf("%s = %q names no compose service", what, raw)
	}
}

// checkIgnored checks that a host file holding a secret stays out of the
// build context.
func checkIgnored(t *testing.T, file string) {
	t.Helper()
	rel := strings.TrimPrefix(path.Clean(file), "./")
	for _, pat := range dockerignore(t) {
		pat = strings.TrimSuffix(strings.TrimPrefix(pat, "/"), "/")
		if rel == pat || strings.HasPrefix(rel, pat+"/") {
			return
		}
		if ok, _ := path.Match(pat, rel); ok {
			return
		}
	}
	t.Errorf("secret file %s is not excluded by .dockerignore: it would be sent to the build", file)
}

// ---------------------------------------------------------------------------
// Inline secrets

func TestComposeNoInlineSecrets(t *testing.T) {
	c, doc := loadCompose(t)
	for name, s := range c.Services {
		for k, v := range s.Environment {
			if !sensitiveName(k) {
				continue
			}
			if msg := checkSecretRef(v); msg != "" {
				t.Errorf("compose.yaml: services.%s.environment.%s: %s", name, k, msg)
			}
		}
	}
	scanNode(t, "compose.yaml", doc)
}

func TestConfigNoInlineSecrets(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(readFile(t, "config/compose.yaml"), &doc); err != nil {
		t.Fatal(err)
	}
	scanNode(t, "config/compose.yaml", &doc)
}

// checkSecretRef says what is wrong with the value of a variable holding a
// secret, or "" when it is a plain reference to the host's environment.
func checkSecretRef(v string) string {
	ref, ok := interpolationRef(v)
	switch {
	case !ok:
		return "the value is written inline; use ${VAR:?...} so it comes from the host's environment or .env"
	case ref.op == "-" || ref.op == ":-" || ref.op == "+" || ref.op == ":+":
		return fmt.Sprintf("${%s%s...} carries a value of its own; use ${%s} or ${%s:?message}", ref.name, ref.op, ref.name, ref.name)
	}
	return ""
}

type interpolation struct{ name, op, arg string }

var interpolationRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?\}$`)

// interpolationRef parses a value that is exactly one ${VAR...} reference.
func interpolationRef(v string) (interpolation, bool) {
	m := interpolationRE.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return interpolation{}, false
	}
	return interpolation{name: m[1], op: m[2], arg: m[3]}, true
}

// expandForTest stands in for compose's interpolation: a reference becomes
// its default, if it has one, else a placeholder.
func expandForTest(v string) string {
	if ref, ok := interpolationRef(v); ok {
		if ref.op == "-" || ref.op == ":-" {
			return ref.arg
		}
		return "placeholder-for-" + ref.name
	}
	return v
}

// sensitiveName reports whether an environment variable's name says it
// holds a secret: KEY_A, OPENAI_API_KEY, DB_PASSWORD, GITHUB_TOKEN... but not
// KEYFLEET_NATS_URL.
func sensitiveName(name string) bool {
	up := strings.ToUpper(name)
	for _, s := range []string{"SECRET", "TOKEN", "PASSWORD", "PASSWD", "PRIVATE", "CREDENTIAL", "APIKEY", "API_KEY", "ACCESS_KEY"} {
		if strings.Contains(up, s) {
			return true
		}
	}
	for part := range strings.SplitSeq(up, "_") {
		switch part {
		case "KEY", "KEYS", "PASS", "PWD", "AUTH":
			return true
		}
	}
	return false
}

var secretShapes = []*regexp.Regexp{
	regexp.MustCompile(`\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}`),         // OpenAI, Anthropic, Stripe style
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),                      // AWS access key ID
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`),              // GitHub tokens
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}`),            // GitHub fine-grained tokens
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),            // Slack
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{30,}`),                  // Google API key
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), // JWT
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`),
}

var (
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pinnedTagRE   = regexp.MustCompile(`^v?\d+(\.\d+)*(-[A-Za-z0-9.]+)*$`)
	placeholderRE = regexp.MustCompile(`(?i)^(replace[-_]?me|change[-_]?me|placeholder)\b`)
	// files that hold secrets, in a COPY or ADD.
	secretPathRE = regexp.MustCompile(`(?i)(^|[\s/])(\.env|secrets?/|\S*\.(pem|key|creds)\b)`)
	// userinfo with a password in a URL: scheme://user:password@host.
	urlPasswordRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/\s@:]*:([^/\s@]+)@`)
	// a run of key-like characters.
	tokenRE = regexp.MustCompile(`[A-Za-z0-9+/=_-]{32,}`)
)

// looksLikeSecret reports why s looks like it holds a secret, or "".
func looksLikeSecret(s string) string {
	for _, re := range secretShapes {
		if re.MatchString(s) {
			return "matches a known key format (" + re.String() + ")"
		}
	}
	for _, m := range urlPasswordRE.FindAllStringSubmatch(s, -1) {
		if _, ok := interpolationRef(m[1]); !ok {
			return "a URL carries a password"
		}
	}
	for _, loc := range tokenRE.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if strings.HasSuffix(s[:loc[0]], "sha256:") { // an image digest
			continue
		}
		if randomLooking(tok) {
			return fmt.Sprintf("a long random-looking string (%d characters)", len(tok))
		}
	}
	return ""
}

// randomLooking reports whether a long token looks generated rather than
// written: letters and digits mixed, with high entropy.
func randomLooking(tok string) bool {
	var upper, lower, digit bool
	for _, r := range tok {
		switch {
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= '0' && r <= '9':
			digit = true
		}
	}
	hex := strings.Trim(strings.ToLower(tok), "0123456789abcdef") == ""
	mixed := digit && (upper && lower || hex)
	return mixed && entropy(tok) >= 3.5
}

// entropy is the Shannon entropy of s in bits per character.
func entropy(s string) float64 {
	counts := map[rune]float64{}
	n := 0.0
	for _, r := range s {
		counts[r]++
		n++
	}
	h := 0.0
	for _, c := range counts {
		p := c / n
		h -= p * math.Log2(p)
	}
	return h
}

// scanNode reports every scalar of a YAML document that looks like a secret.
func scanNode(t *testing.T, file string, n *yaml.Node) {
	t.Helper()
	walkScalars(n, func(s *yaml.Node) {
		if why := looksLikeSecret(s.Value); why != "" {
			t.Errorf("%s:%d: %s; secrets belong in the environment or a mounted file", file, s.Line, why)
		}
	})
}

func walkScalars(n *yaml.Node, f func(*yaml.Node)) {
	if n.Kind == yaml.ScalarNode {
		f(n)
	}
	for _, c := range n.Content {
		walkScalars(c, f)
	}
}

// TestSecretDetector shows the scan finds what it is meant to and passes
// what the deployment files legitimately hold. The fake keys are made at
// run time so that no key-shaped string sits in the repository.
func TestSecretDetector(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	random := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alnum[rng.IntN(len(alnum))]
		}
		return string(b)
	}
	for _, s := range []string{
		"sk-" + random(40),
		"sk-proj-" + random(40),
		"AKIA" + strings.ToUpper(random(16)),
		"gh" + "p_" + random(36),
		random(40),
		"Bearer " + random(48),
		"redis://:" + "hunter2" + "@redis:6379/0",
		"-----BEGIN " + "RSA PRIVATE KEY-----",
	} {
		if looksLikeSecret(s) == "" {
			t.Errorf("looksLikeSecret(%.12q...) = \"\", want it flagged", s)
		}
	}
	for _, s := range []string{
		"${KEY_A:?set KEY_A in your shell or .env}",
		"replace-me",
		"nats://nats:4222",
		"redis://redis:6379/0",
		"redis://:${REDIS_PASSWORD}@redis:6379/0",
		"/run/secrets/key-b",
		"nats.nats.svc.cluster.local:8222",
		"github.com/keyfleet/keyfleet/internal/version.Version",
		"KEYFLEET_CREDENTIAL_SECRET",
		"nats@sha256:" + strings.Repeat("0123456789abcdef", 4),
	} {
		if why := looksLikeSecret(s); why != "" {
			t.Errorf("looksLikeSecret(%q) = %q, want \"\"", s, why)
		}
	}
	for name, want := range map[string]bool{
		"KEY_A": true, "OPENAI_API_KEY": true, "DB_PASSWORD": true, "GITHUB_TOKEN": true,
		"CLIENT_SECRET": true, "KEYFLEET_NATS_URL": false, "KEYFLEET_CONFIG": false, "POD_NAME": false,
	} {
		if got := sensitiveName(name); got != want {
			t.Errorf("sensitiveName(%q) = %v, want %v", name, got, want)
		}
	}
	for v, ok := range map[string]bool{
		"${KEY_A}": true, "${KEY_A:?set it}": true, "${KEY_A?}": true,
		"plain": false, "${KEY_A:-inline}": false, "prefix-${KEY_A}": false,
	} {
		if got := checkSecretRef(v) == ""; got != ok {
			t.Errorf("checkSecretRef(%q) accepted = %v, want %v", v, got, ok)
		}
	}
}

// ---------------------------------------------------------------------------
// Kubernetes

type k8sMeta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

type k8sObject struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`

	file string
	node *yaml.Node
}

type k8sConfigMap struct {
	Data map[string]string `yaml:"data"`
}

type k8sSecret struct {
	Type       string            `yaml:"type"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sContainer struct {
	Name           string       `yaml:"name"`
	Image          string       `yaml:"image"`
	Command        []string     `yaml:"command"`
	Args           []string     `yaml:"args"`
	Env            []k8sEnvVar  `yaml:"env"`
	EnvFrom        []k8sEnvFrom `yaml:"envFrom"`
	Ports          []k8sPort    `yaml:"ports"`
	LivenessProbe  *k8sProbe    `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe    `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *k8sSecurityContext `yaml:"securityContext"`
	VolumeMounts    []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type k8sEnvVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type k8sEnvFrom struct {
	SecretRef *struct {
		Name string `yaml:"name"`
	} `yaml:"secretRef"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type k8sSecurityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	RunAsUser                *int  `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
}

type k8sVolume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
		Items      []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"secret"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds *int                `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               *k8sSecurityContext `yaml:"securityContext"`
				Containers                    []k8sContainer      `yaml:"containers"`
				Volumes                       []k8sVolume         `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sScaledObject struct {
	Spec struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		MaxReplicaCount *int `yaml:"maxReplicaCount"`
		Fallback        *struct {
			FailureThreshold int `yaml:"failureThreshold"`
			Replicas         int `yaml:"replicas"`
		} `yaml:"fallback"`
		Triggers []struct {
			Type     string         `yaml:"type"`
			Metadata map[string]any `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []k8sServicePort  `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"`
}

type k8sNetworkPolicy struct {
	Spec struct {
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		PolicyTypes []string         `yaml:"policyTypes"`
		Ingress     []k8sIngressRule `yaml:"ingress"`
	} `yaml:"spec"`
}

type k8sIngressRule struct {
	From  []k8sPolicyPeer `yaml:"from"`
	Ports []k8sPolicyPort `yaml:"ports"`
}

type k8sPolicyPeer struct {
	NamespaceSelector *struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"namespaceSelector"`
	PodSelector *struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"podSelector"`
}

type k8sPolicyPort struct {
	Port any `yaml:"port"`
}

// loadK8s parses every document of deploy/kubernetes/*.yaml.
func loadK8s(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no deploy/kubernetes/*.yaml")
	}
	var objs []k8sObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(n.Content) == 0 {
				continue
			}
			o := k8sObject{file: filepath.Base(f), node: &n}
			if err := n.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s:%d: want apiVersion, kind and metadata.name", o.file, n.Line)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// only returns the single object of a kind, decoded into v.
func only(t *testing.T, objs []k8sObject, kind string, v any) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("deploy/kubernetes: %d objects of kind %s, want 1", len(found), kind)
	}
	if err := found[0].node.Decode(v); err != nil {
		t.Fatalf("%s: %v", found[0].file, err)
	}
	return found[0]
}

// k8sFixture is the parsed manifests and the config the workers load.
type k8sFixture struct {
	objs       []k8sObject
	deployObj  k8sObject
	deploy     k8sDeployment
	container  k8sContainer
	secretObj  k8sObject
	secret     k8sSecret
	cfg        *config.Config
	configPath string
	configKey  string // the ConfigMap key the workers read

	worker workload // deployObj, deploy and container together
	// The dashboard (producer dashboard), which the ScaledObject reads.
	dash          workload
	dashCfg       *config.Config
	dashConfigKey string
}

// workload is a Deployment and its one container.
type workload struct {
	obj       k8sObject
	deploy    k8sDeployment
	container k8sContainer
}

func loadK8sFixture(t *testing.T) k8sFixture {
	t.Helper()
	var f k8sFixture
	f.objs = loadK8s(t)
	worker := deploymentRunning(t, f.objs, "worker")
	f.worker, f.deployObj, f.deploy, f.container = worker, worker.obj, worker.deploy, worker.container
	f.dash = deploymentRunning(t, f.objs, "producer", "dashboard")
	f.secretObj = only(t, f.objs, "Secret", &f.secret)
	var cm k8sConfigMap
	cmObj := only(t, f.objs, "ConfigMap", &cm)

	f.cfg, f.configPath, f.configKey = containerConfig(t, worker, cmObj, cm)
	f.dashCfg, _, f.dashConfigKey = containerConfig(t, f.dash, cmObj, cm)
	return f
}

// deploymentRunning returns the one Deployment whose container's args
// start with prog (the image's entrypoint is tini, so args name the
// program). Every Deployment has one container.
func deploymentRunning(t *testing.T, objs []k8sObject, prog ...string) workload {
	t.Helper()
	var found []workload
	for _, o := range objs {
		if o.Kind != "Deployment" {
			continue
		}
		var d k8sDeployment
		if err := o.node.Decode(&d); err != nil {
			t.Fatalf("%s: %v", o.file, err)
		}
		cs := d.Spec.Template.Spec.Containers
		if len(cs) != 1 {
			t.Fatalf("%s: Deployment %s has %d containers, want 1", o.file, o.Metadata.Name, len(cs))
		}
		if len(cs[0].Args) >= len(prog) && slices.Equal(cs[0].Args[:len(prog)], prog) {
			found = append(found, workload{obj: o, deploy: d, container: cs[0]})
		}
	}
	if len(found) != 1 {
		t.Fatalf("deploy/kubernetes: %d Deployments run %q, want 1", len(found), strings.Join(prog, " "))
	}
	return found[0]
}

// containerConfig loads the config a container reads, exactly as it
// would: the ConfigMap key mounted at its --config path, with its
// environment. It returns the config, the path and the key.
func containerConfig(t *testing.T, w workload, cmObj k8sObject, cm k8sConfigMap) (*config.Config, string, string) {
	t.Helper()
	c := w.container
	argv := append(slices.Clone(c.Command), c.Args...)
	configPath := flagValue(argv, "--config")
	if configPath == "" {
		t.Fatalf("%s: the args %q have no --config", w.obj.file, argv)
	}
	var key string
	for _, m := range c.VolumeMounts {
		v := volumeByName(w.deploy, m.Name)
		if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != cmObj.Metadata.Name {
			continue
		}
		switch {
		case m.SubPath != "" && m.MountPath == configPath:
			key = m.SubPath
		case m.SubPath == "" && path.Dir(configPath) == path.Clean(m.MountPath):
			key = path.Base(configPath)
		}
	}
	if key == "" {
		t.Fatalf("%s: --config %s is not a file of the ConfigMap %s mounted in the container", w.obj.file, configPath, cmObj.Metadata.Name)
	}
	text, ok := cm.Data[key]
	if !ok {
		t.Fatalf("%s: the ConfigMap %s has no key %q (%s's --config %s)", cmObj.file, cmObj.Metadata.Name, key, w.obj.Metadata.Name, configPath)
	}
	file := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.Value != nil {
			env[e.Name] = *e.Value
		}
	}
	cfg, err := config.Load(file, func(k string) string {
		if k == config.EnvConfig {
			return ""
		}
		return env[k]
	})
	if err != nil {
		t.Fatalf("%s: the ConfigMap's %s does not load: %v", cmObj.file, key, err)
	}
	return cfg, configPath, key
}

func volumeByName(d k8sDeployment, name string) *k8sVolume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

func TestKubernetesManifests(t *testing.T) {
	f := loadK8sFixture(t)

	t.Run("namespaces", func(t *testing.T) {
		want := ""
		for _, o := range f.objs {
			if o.Kind == "Namespace" {
				want = o.Metadata.Name
			}
		}
		for _, o := range f.objs {
			if o.Kind == "Namespace" {
				continue
			}
			if want == "" {
				want = o.Metadata.Namespace
			}
			if o.Metadata.Namespace != want {
				t.Errorf("%s: %s %s in namespace %q, want %q like the rest", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace, want)
			}
		}
	})

	t.Run("deployment", func(t *testing.T) {
		d, c := f.deploy, f.container
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 1 {
			t.Errorf("deployment: want replicas >= 1")
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if d.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("deployment: the selector's %s=%s is not a label of the pod template", k, v)
			}
		}
		if c.Image == "" {
			t.Errorf("deployment: no image")
		}
		if len(c.Command) > 0 {
			t.Errorf("deployment: command %q replaces the image's tini entrypoint; use args", c.Command)
		}
		if len(c.Args) == 0 || c.Args[0] != "worker" {
			t.Errorf("deployment: args %q, want worker --config ...", c.Args)
		}
	})

	t.Run("ports and probes", func(t *testing.T) {
		c := f.container
		host, port := listenHostPort(t, f.cfg.Worker.Listen)
		if isLoopback(host) {
			t.Errorf("worker.listen %q is loopback-only: the kubelet's probes cannot reach it", f.cfg.Worker.Listen)
		}
		if f.cfg.Worker.PProf {
			t.Errorf("worker.pprof is on with worker.listen %q open to every scraper: anyone who can scrape metrics could run profiles", f.cfg.Worker.Listen)
		}
		portNum, _ := strconv.Atoi(port)
		i := slices.IndexFunc(c.Ports, func(p k8sPort) bool { return p.Name == "metrics" })
		if i < 0 {
			t.Fatalf("deployment: no containerPort named metrics")
		}
		if c.Ports[i].ContainerPort != portNum {
			t.Errorf("deployment: port metrics is %d, worker.listen's port is %d", c.Ports[i].ContainerPort, portNum)
		}
		for _, p := range []struct {
			name  string
			probe *k8sProbe
			path  string
		}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("deployment: no %s httpGet", p.name)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				t.Errorf("deployment: %s path %q, want %s", p.name, p.probe.HTTPGet.Path, p.path)
			}
			if got := fmt.Sprint(p.probe.HTTPGet.Port); got != "metrics" && got != port {
				t.Errorf("deployment: %s port %v, want metrics (%s)", p.name, p.probe.HTTPGet.Port, port)
			}
		}
		// Each Service selects the pods of exactly one Deployment (the
		// workers' metrics, the dashboard) and targets a port of it.
		for _, o := range f.objs {
			if o.Kind != "Service" {
				continue
			}
			var s k8sService
			if err := o.node.Decode(&s); err != nil {
				t.Fatal(err)
			}
			var selected []workload
			for _, w := range []workload{f.worker, f.dash} {
				if len(s.Spec.Selector) > 0 && labelsMatch(s.Spec.Selector, w.deploy.Spec.Template.Metadata.Labels) {
					selected = append(selected, w)
				}
			}
			if len(selected) != 1 {
				t.Errorf("%s: Service %s selects the pods of %d Deployments (selector %v), want exactly one", o.file, o.Metadata.Name, len(selected), s.Spec.Selector)
				continue
			}
			w := selected[0]
			for _, p := range s.Spec.Ports {
				if _, ok := containerPort(w.container, p.TargetPort); !ok {
					t.Errorf("%s: Service %s targetPort %v is no port of %s's container", o.file, o.Metadata.Name, p.TargetPort, w.obj.Metadata.Name)
				}
			}
			if w.obj.Metadata.Name == f.deployObj.Metadata.Name {
				for _, p := range s.Spec.Ports {
					if tp := fmt.Sprint(p.TargetPort); tp != "metrics" && tp != port {
						t.Errorf("%s: targetPort %v, want metrics", o.file, p.TargetPort)
					}
				}
			}
		}
	})

	t.Run("termination grace", func(t *testing.T) {
		tg := f.deploy.Spec.Template.Spec.TerminationGracePeriodSeconds
		if tg == nil {
			t.Fatalf("deployment: no terminationGracePeriodSeconds (the default 30s must be checked against worker.shutdown_grace %s)", f.cfg.Worker.ShutdownGrace)
		}
		got := time.Duration(*tg) * time.Second
		if least := f.cfg.Worker.ShutdownGrace + minStopMargin; got < least {
			t.Errorf("deployment: terminationGracePeriodSeconds %d, want at least worker.shutdown_grace %s + %s", *tg, f.cfg.Worker.ShutdownGrace, minStopMargin)
		}
	})

	t.Run("resources and security", func(t *testing.T) {
		for _, w := range []workload{f.worker, f.dash} {
			checkPodHardened(t, w)
		}
	})

	t.Run("secrets wired", func(t *testing.T) {
		c := f.container
		secretName := f.secretObj.Metadata.Name
		keys := map[string]bool{}
		for k := range f.secret.StringData {
			keys[k] = true
		}
		for k := range f.secret.Data {
			keys[k] = true
		}
		for _, cr := range f.cfg.Pool.Credentials {
			switch {
			case cr.SecretEnv != "":
				i := slices.IndexFunc(c.Env, func(e k8sEnvVar) bool { return e.Name == cr.SecretEnv })
				if i < 0 {
					fromAll := slices.ContainsFunc(c.EnvFrom, func(e k8sEnvFrom) bool {
						return e.SecretRef != nil && e.SecretRef.Name == secretName
					})
					if !fromAll || !keys[cr.SecretEnv] {
						t.Errorf("credential %s: no env %s from the Secret %s", cr.ID, cr.SecretEnv, secretName)
					}
					continue
				}
				e := c.Env[i]
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("credential %s: env %s is not a secretKeyRef", cr.ID, cr.SecretEnv)
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if ref.Name != secretName || !keys[ref.Key] {
					t.Errorf("credential %s: env %s refers to %s/%s, not a key of the Secret %s", cr.ID, cr.SecretEnv, ref.Name, ref.Key, secretName)
				}
			case cr.SecretFile != "":
				if !secretFileMounted(f, cr.SecretFile, secretName, keys) {
					t.Errorf("credential %s: secret_file %s is not a key of the Secret %s mounted in the container", cr.ID, cr.SecretFile, secretName)
				}
			}
		}
		for _, e := range c.Env {
			if e.Value != nil && sensitiveName(e.Name) {
				t.Errorf("deployment: env %s has an inline value; take it from the Secret (valueFrom.secretKeyRef)", e.Name)
			}
		}
	})

	t.Run("secret holds placeholders", func(t *testing.T) {
		if f.secret.Type != "Opaque" {
			t.Errorf("secret: type %q, want Opaque", f.secret.Type)
		}
		if len(f.secret.Data) > 0 {
			t.Errorf("secret: data (base64) hides its values; use stringData placeholders")
		}
		if len(f.secret.StringData) == 0 {
			t.Errorf("secret: no stringData keys")
		}
		for k, v := range f.secret.StringData {
			if !placeholderRE.MatchString(v) {
				t.Errorf("secret: stringData.%s is not a placeholder such as replace-me", k)
			}
		}
	})

	t.Run("no inline secrets", func(t *testing.T) {
		for _, o := range f.objs {
			scanNode(t, filepath.Join("deploy/kubernetes", o.file), o.node)
		}
	})
}

// checkPodHardened checks a Deployment's resources and security context:
// requests and a memory limit, non-root as the image's USER, a read-only
// root filesystem, no privilege escalation.
func checkPodHardened(t *testing.T, w workload) {
	t.Helper()
	c, name := w.container, w.obj.Metadata.Name
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("deployment %s: no resources.requests.%s", name, r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Errorf("deployment %s: no resources.limits.memory", name)
	}
	pod := w.deploy.Spec.Template.Spec.SecurityContext
	csc := c.SecurityContext
	nonRoot := (pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot) || (csc != nil && csc.RunAsNonRoot != nil && *csc.RunAsNonRoot)
	if !nonRoot {
		t.Errorf("deployment %s: want securityContext.runAsNonRoot: true", name)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Errorf("deployment %s: want the container's securityContext.readOnlyRootFilesystem: true", name)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("deployment %s: want the container's securityContext.allowPrivilegeEscalation: false", name)
	}
	// The image's USER is the uid the pod runs as.
	if uid, ok := dockerfileUID(t); ok {
		for _, sc := range []*k8sSecurityContext{pod, csc} {
			if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser != uid {
				t.Errorf("deployment %s: runAsUser %d, the Dockerfile's USER is %d", name, *sc.RunAsUser, uid)
			}
		}
	}
}

// labelsMatch reports whether every label of sel is one of labels.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a port given by name or number to one of the
// container's ports.
func containerPort(c k8sContainer, ref any) (k8sPort, bool) {
	s := fmt.Sprint(ref)
	for _, p := range c.Ports {
		if p.Name == s || strconv.Itoa(p.ContainerPort) == s {
			return p, true
		}
	}
	return k8sPort{}, false
}

// secretFileMounted reports whether file is a key of the Secret, mounted as
// a file at that path.
func secretFileMounted(f k8sFixture, file, secretName string, keys map[string]bool) bool {
	for _, m := range f.container.VolumeMounts {
		v := volumeByName(f.deploy, m.Name)
		if v == nil || v.Secret == nil || v.Secret.SecretName != secretName {
			continue
		}
		var rel string
		switch {
		case m.SubPath != "" && m.MountPath == file:
			rel = m.SubPath
		case m.SubPath == "" && strings.HasPrefix(file, path.Clean(m.MountPath)+"/"):
			rel = strings.TrimPrefix(file, path.Clean(m.MountPath)+"/")
		default:
			continue
		}
		if len(v.Secret.Items) == 0 {
			if keys[rel] {
				return true
			}
			continue
		}
		for _, it := range v.Secret.Items {
			if it.Path == rel && keys[it.Key] {
				return true
			}
		}
	}
	return false
}

func TestKEDAScaledObject(t *testing.T) {
	f := loadK8sFixture(t)
	var so k8sScaledObject
	o := only(t, f.objs, "ScaledObject", &so)
	if o.APIVersion != "keda.sh/v1alpha1" {
		t.Errorf("%s: apiVersion %q, want keda.sh/v1alpha1", o.file, o.APIVersion)
	}
	ref := so.Spec.ScaleTargetRef
	if ref.Name != f.deployObj.Metadata.Name {
		t.Errorf("%s: scaleTargetRef.name %q, want the Deployment %q", o.file, ref.Name, f.deployObj.Metadata.Name)
	}
	if ref.Kind != "" && ref.Kind != "Deployment" {
		t.Errorf("%s: scaleTargetRef.kind %q, want Deployment", o.file, ref.Kind)
	}
	if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil {
		t.Errorf("%s: want minReplicaCount and maxReplicaCount", o.file)
	} else if *so.Spec.MinReplicaCount < 0 || *so.Spec.MaxReplicaCount < 1 || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
		t.Errorf("%s: minReplicaCount %d, maxReplicaCount %d", o.file, *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount)
	}
	if fb := so.Spec.Fallback; fb != nil && so.Spec.MinReplicaCount != nil && so.Spec.MaxReplicaCount != nil {
		if fb.FailureThreshold < 1 || fb.Replicas < max(*so.Spec.MinReplicaCount, 1) || fb.Replicas > *so.Spec.MaxReplicaCount {
			t.Errorf("%s: fallback failureThreshold %d replicas %d, want >= 1 and at least one worker, at most maxReplicaCount", o.file, fb.FailureThreshold, fb.Replicas)
		}
	}
	if len(so.Spec.Triggers) != 1 {
		t.Fatalf("%s: %d triggers, want one of type metrics-api", o.file, len(so.Spec.Triggers))
	}
	switch typ := so.Spec.Triggers[0].Type; typ {
	case "metrics-api":
	case "nats-jetstream":
		t.Fatalf("%s: the nats-jetstream scaler reads one consumer, and each batch has its own (%s-b-<16 hex>): it would see about 0 and scale the workers down while batches wait; want metrics-api on the dashboard's consumer.backlog", o.file, f.cfg.Queue.Consumer)
	default:
		t.Fatalf("%s: trigger of type %s, want metrics-api", o.file, typ)
	}
	md := so.Spec.Triggers[0].Metadata
	str := func(k string) string {
		v, ok := md[k]
		if !ok {
			t.Errorf("%s: trigger metadata lacks %s", o.file, k)
			return ""
		}
		s, ok := v.(string)
		if !ok {
			t.Errorf("%s: trigger metadata %s is %T; KEDA takes strings (quote it)", o.file, k, v)
		}
		return s
	}
	// The metrics-api scaler's parameters (KEDA docs, scalers/metrics-api):
	// it GETs url and reads the number at valueLocation.
	known := []string{"url", "format", "valueLocation", "targetValue", "activationTargetValue", "unsafeSsl", "authMode",
		"method", "keyParamName", "aggregateFromKubeServiceEndpoints", "aggregationType"}
	for k := range md {
		if !slices.Contains(known, k) {
			t.Errorf("%s: trigger metadata %q is not a parameter of the metrics-api scaler", o.file, k)
		}
	}
	if v, ok := md["format"]; ok && v != "json" {
		t.Errorf("%s: format %v, want json (/api/status is JSON)", o.file, v)
	}
	if v, ok := md["aggregateFromKubeServiceEndpoints"]; ok && v != "false" {
		t.Errorf("%s: aggregateFromKubeServiceEndpoints %v would add up the backlog of every dashboard replica", o.file, v)
	}
	for _, k := range []string{"targetValue", "activationTargetValue"} {
		n, err := strconv.ParseFloat(str(k), 64)
		if err != nil || n < 0 || (k == "targetValue" && n <= 0) {
			t.Errorf("%s: %s %q, want a positive number", o.file, k, md[k])
		}
	}

	t.Run("url is the dashboard's /api/status", func(t *testing.T) {
		raw := str("url")
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			t.Fatalf("%s: url %q, want http://<service>.<namespace>.svc.cluster.local:<port>/api/status", o.file, raw)
		}
		if u.Scheme != "http" {
			t.Errorf("%s: url %q: the dashboard serves plain http", o.file, raw)
		}
		if u.Path != "/api/status" || u.RawQuery != "" {
			t.Errorf("%s: url path %q, want /api/status", o.file, u.RequestURI())
		}
		// KEDA's operator resolves the name from its own namespace: the
		// Service's namespace must be in the name.
		labels := strings.Split(u.Hostname(), ".")
		if len(labels) < 2 || (len(labels) > 2 && labels[2] != "svc") {
			t.Fatalf("%s: url host %q, want <service>.<namespace>.svc.cluster.local (the operator runs in its own namespace)", o.file, u.Hostname())
		}
		svcObj, svc := serviceNamed(t, f.objs, labels[0], labels[1])
		if svc == nil {
			t.Fatalf("%s: url host %q names no Service %s in namespace %s", o.file, u.Hostname(), labels[0], labels[1])
		}
		if !labelsMatch(svc.Spec.Selector, f.dash.deploy.Spec.Template.Metadata.Labels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("%s: Service %s does not select the dashboard's pods", svcObj.file, svcObj.Metadata.Name)
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		i := slices.IndexFunc(svc.Spec.Ports, func(p k8sServicePort) bool { return strconv.Itoa(p.Port) == port })
		if i < 0 {
			t.Fatalf("%s: url port %s is no port of the Service %s", o.file, port, svcObj.Metadata.Name)
		}
		cp, ok := containerPort(f.dash.container, svc.Spec.Ports[i].TargetPort)
		if !ok {
			t.Fatalf("%s: Service %s port %s targets %v, no port of the dashboard", svcObj.file, svcObj.Metadata.Name, port, svc.Spec.Ports[i].TargetPort)
		}
		if _, lport := dashboardListen(t, f.dash); lport != strconv.Itoa(cp.ContainerPort) {
			t.Errorf("%s: url reaches the dashboard's port %d, but it listens on %s", o.file, cp.ContainerPort, lport)
		}
	})

	// valueLocation must reach the backlog in what /api/status serves (a
	// dashboard.Snapshot), not pending or ack pending alone.
	t.Run("valueLocation is the backlog", func(t *testing.T) {
		loc := str("valueLocation")
		var snap dashboard.Snapshot
		snap.Consumer = status.Consumer{Pending: 5, AckPending: 7, Backlog: 12}
		data, err := json.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonPath(data, loc)
		if err != nil {
			t.Fatalf("%s: valueLocation %q in /api/status: %v", o.file, loc, err)
		}
		if n, ok := v.(float64); !ok || n != 12 {
			t.Errorf("%s: valueLocation %q reads %v from /api/status, want the backlog (pending 5 + ack pending 7 = 12)", o.file, loc, v)
		}
	})
}

// jsonPath reads the value at a dot-separated path of object keys (the
// subset of GJSON's syntax the ScaledObject may use).
func jsonPath(data []byte, loc string) (any, error) {
	if loc == "" || strings.ContainsAny(loc, `*?#@|\!()[]{}`) {
		return nil, fmt.Errorf("want a plain path of keys such as consumer.backlog")
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	for key := range strings.SplitSeq(loc, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: not an object", key)
		}
		if v, ok = m[key]; !ok {
			return nil, fmt.Errorf("no key %q", key)
		}
	}
	return v, nil
}

// serviceNamed returns the Service name in namespace ns, or nil.
func serviceNamed(t *testing.T, objs []k8sObject, name, ns string) (k8sObject, *k8sService) {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "Service" || o.Metadata.Name != name || o.Metadata.Namespace != ns {
			continue
		}
		var s k8sService
		if err := o.node.Decode(&s); err != nil {
			t.Fatalf("%s: %v", o.file, err)
		}
		return o, &s
	}
	return k8sObject{}, nil
}

// dashboardListen returns the host and port of the dashboard's --listen
// (the CLI's default is 127.0.0.1:8080).
func dashboardListen(t *testing.T, w workload) (string, string) {
	t.Helper()
	listen := flagValue(w.container.Args, "--listen")
	if listen == "" {
		listen = "127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("%s: --listen %q: %v", w.obj.file, listen, err)
	}
	return host, port
}

// TestKubernetesDashboard checks the dashboard the ScaledObject reads: the
// workers' config and image, reachable in the pod, read-only, without the
// credentials' secrets, probed, and admitted by its NetworkPolicy.
func TestKubernetesDashboard(t *testing.T) {
	f := loadK8sFixture(t)
	d := f.dash
	c, file := d.container, d.obj.file

	t.Run("same config and image as the workers", func(t *testing.T) {
		if f.dashConfigKey != f.configKey {
			t.Errorf("%s: the dashboard reads the ConfigMap key %q, the workers %q", file, f.dashConfigKey, f.configKey)
		}
		w, g := f.cfg, f.dashCfg
		for _, p := range [][3]string{
			{"queue.stream", w.Queue.Stream, g.Queue.Stream},
			{"queue.consumer", w.Queue.Consumer, g.Queue.Consumer},
			{"pool.name", w.Pool.Name, g.Pool.Name},
			{"nats.url", w.NATS.URL, g.NATS.URL},
			{"redis.url", w.Redis.URL, g.Redis.URL},
		} {
			if p[1] != p[2] {
				t.Errorf("%s: the dashboard's %s is %q, the workers' %q: it would read another fleet", file, p[0], p[2], p[1])
			}
		}
		if c.Image != f.container.Image {
			t.Errorf("%s: image %q, the workers' %q", file, c.Image, f.container.Image)
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: command %q replaces the image's tini entrypoint; use args", file, c.Command)
		}
		if r := d.deploy.Spec.Replicas; r == nil || *r < 1 {
			t.Errorf("%s: want replicas >= 1: the ScaledObject reads it", file)
		}
	})

	t.Run("listens in the pod", func(t *testing.T) {
		host, port := dashboardListen(t, d)
		if isLoopback(host) {
			t.Errorf("%s: --listen %s is loopback: the probes, the Service and KEDA cannot reach it (want --listen 0.0.0.0:%s)", file, net.JoinHostPort(host, port), port)
		}
		p, ok := containerPort(c, port)
		if !ok {
			t.Fatalf("%s: --listen port %s is no containerPort", file, port)
		}
		for _, pr := range []struct {
			name  string
			probe *k8sProbe
			paths []string
		}{{"livenessProbe", c.LivenessProbe, []string{"/healthz"}}, {"readinessProbe", c.ReadinessProbe, []string{"/healthz", "/api/status"}}} {
			if pr.probe == nil || pr.probe.HTTPGet == nil {
				t.Errorf("%s: no %s httpGet", file, pr.name)
				continue
			}
			if !slices.Contains(pr.paths, pr.probe.HTTPGet.Path) {
				t.Errorf("%s: %s path %q, want one of %q", file, pr.name, pr.probe.HTTPGet.Path, pr.paths)
			}
			if got, ok := containerPort(c, pr.probe.HTTPGet.Port); !ok || got != p {
				t.Errorf("%s: %s port %v, want the dashboard's %s", file, pr.name, pr.probe.HTTPGet.Port, port)
			}
		}
	})

	t.Run("read-only, no credentials", func(t *testing.T) {
		// KEDA needs no token for /api/status; a token, if any, comes from
		// a Secret.
		if name := flagValue(c.Args, "--admin-token-env"); name != "" {
			i := slices.IndexFunc(c.Env, func(e k8sEnvVar) bool { return e.Name == name })
			if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: --admin-token-env %s is not an env var from a Secret", file, name)
			}
		}
		// The dashboard never reads a credential's secret: it gets none.
		keys := f.secretObj.Metadata.Name
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == keys {
				t.Errorf("%s: env %s comes from the credentials' Secret %s, which the dashboard does not need", file, e.Name, keys)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name == keys {
				t.Errorf("%s: envFrom the credentials' Secret %s, which the dashboard does not need", file, keys)
			}
		}
		for _, v := range d.deploy.Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == keys {
				t.Errorf("%s: volume %s mounts the credentials' Secret %s, which the dashboard does not need", file, v.Name, keys)
			}
		}
	})

	t.Run("network policy admits KEDA", func(t *testing.T) {
		_, port := dashboardListen(t, d)
		podLabels := d.deploy.Spec.Template.Metadata.Labels
		for _, o := range f.objs {
			if o.Kind != "NetworkPolicy" {
				continue
			}
			var np k8sNetworkPolicy
			if err := o.node.Decode(&np); err != nil {
				t.Fatal(err)
			}
			if !labelsMatch(np.Spec.PodSelector.MatchLabels, podLabels) {
				continue
			}
			if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, "Ingress") {
				continue
			}
			// KEDA's operator runs in its own namespace: some rule must
			// admit another namespace on the dashboard's port.
			admitted := slices.ContainsFunc(np.Spec.Ingress, func(r k8sIngressRule) bool {
				portOK := len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(p k8sPolicyPort) bool {
					got, ok := containerPort(c, p.Port)
					return p.Port == nil || (ok && strconv.Itoa(got.ContainerPort) == port)
				})
				fromOK := len(r.From) == 0 || slices.ContainsFunc(r.From, func(p k8sPolicyPeer) bool { return p.NamespaceSelector != nil })
				return portOK && fromOK
			})
			if !admitted {
				t.Errorf("%s: NetworkPolicy %s admits no other namespace on the dashboard's port %s: KEDA could not read the backlog", o.file, o.Metadata.Name, port)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Dockerfile and .dockerignore

type dockerInstr struct {
	cmd  string // upper case
	args string
	line int
}

type dockerStage struct {
	from   string // image, with global ARGs expanded
	name   string
	instrs []dockerInstr
}

// parseDockerfile reads the Dockerfile's stages: their base images (global
// ARG defaults expanded) and instructions (comments dropped, continuations
// joined).
func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(readFile(t, "Dockerfile"))))
	var instrs []dockerInstr
	var cur strings.Builder
	start, lineNo := 0, 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = lineNo
		}
		if body, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		instrs = append(instrs, dockerInstr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	globals := map[string]string{}
	var stages []dockerStage
	for _, in := range instrs {
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			fields = slices.DeleteFunc(fields, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := dockerStage{}
			if len(fields) > 0 {
				st.from = os.Expand(fields[0], func(k string) string { return globals[k] })
			}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
		case len(stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			globals[k] = strings.Trim(v, `"`)
		case len(stages) > 0:
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
		}
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a multi-stage build (builder + runtime)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	t.Run("builder", func(t *testing.T) {
		repo, tag := splitImage(build.from)
		if repo != "golang" {
			t.Fatalf("Dockerfile: builder FROM %q, want the official golang image", build.from)
		}
		goVersion := goModVersion(t)
		v, _, _ := strings.Cut(tag, "-")
		if v != goVersion && !strings.HasPrefix(goVersion, v+".") {
			t.Errorf("Dockerfile: builder golang:%s, go.mod says go %s", tag, goVersion)
		}
		all := instrText(build)
		for _, want := range []string{
			"CGO_ENABLED=0",
			"go mod download",
			"-X github.com/keyfleet/keyfleet/internal/version.Version=${VERSION}",
			"./cmd/...",
		} {
			if !strings.Contains(all, want) {
				t.Errorf("Dockerfile: the builder stage lacks %q", want)
			}
		}
		if !slices.ContainsFunc(build.instrs, func(in dockerInstr) bool { return in.cmd == "ARG" && strings.HasPrefix(in.args, "VERSION") }) {
			t.Errorf("Dockerfile: no ARG VERSION in the builder stage")
		}
		// The module download is its own layer: before the sources come in.
		dl := slices.IndexFunc(build.instrs, func(in dockerInstr) bool { return in.cmd == "RUN" && strings.Contains(in.args, "go mod download") })
		src := slices.IndexFunc(build.instrs, func(in dockerInstr) bool {
			return in.cmd == "COPY" && (strings.HasPrefix(in.args, ". ") || strings.Contains(in.args, " . "))
		})
		if dl < 0 || src < 0 || dl > src {
			t.Errorf("Dockerfile: want COPY go.mod go.sum, RUN go mod download, then COPY . . (module layer cached)")
		}
	})

	t.Run("runtime", func(t *testing.T) {
		if strings.Contains(final.from, "distroless") || final.from == "scratch" {
			t.Errorf("Dockerfile: runtime FROM %s has no /bin/sh, which exec jobs need", final.from)
		}
		if _, tag := splitImage(final.from); !pinnedTag(tag) {
			t.Errorf("Dockerfile: runtime FROM %s is not pinned", final.from)
		}
		uid, ok := dockerfileUID(t)
		if !ok {
			t.Errorf("Dockerfile: the runtime stage has no numeric USER (Kubernetes' runAsNonRoot needs one)")
		} else if uid == 0 {
			t.Errorf("Dockerfile: USER is root")
		}
		var copied bool
		for _, in := range final.instrs {
			if in.cmd != "COPY" && in.cmd != "ADD" {
				continue
			}
			if in.cmd == "ADD" || !strings.Contains(in.args, "--from=") {
				t.Errorf("Dockerfile:%d: the runtime stage takes %q from the build context; only binaries from the builder belong there", in.line, in.args)
				continue
			}
			if strings.Contains(in.args, "producer") && strings.Contains(in.args, "worker") && strings.HasSuffix(in.args, "/usr/local/bin/") {
				copied = true
			}
		}
		if !copied {
			t.Errorf("Dockerfile: want both producer and worker copied to /usr/local/bin/")
		}
		var entry, cmd []string
		for _, in := range final.instrs {
			switch in.cmd {
			case "ENTRYPOINT":
				entry = execForm(t, in)
			case "CMD":
				cmd = execForm(t, in)
			}
		}
		// `docker run IMAGE worker ...` and `docker run IMAGE producer ...`:
		// the first argument is the program, so the entrypoint, if any, is
		// an init that runs its arguments (tini --).
		if len(entry) > 0 && entry[len(entry)-1] != "--" {
			t.Errorf("Dockerfile: ENTRYPOINT %q would swallow `docker run IMAGE producer ...`; want none or an init ending in --", entry)
		}
		if len(cmd) == 0 || cmd[0] != "worker" {
			t.Errorf("Dockerfile: CMD %q, want [\"worker\"]", cmd)
		}
	})

	t.Run("no secrets", func(t *testing.T) {
		for _, st := range stages {
			for _, in := range st.instrs {
				if in.cmd == "ENV" || in.cmd == "ARG" {
					for _, name := range envNames(in.args) {
						if sensitiveName(name) {
							t.Errorf("Dockerfile:%d: %s %s: secrets are never build args or image environment; pass them at run time", in.line, in.cmd, name)
						}
					}
				}
				if why := looksLikeSecret(in.args); why != "" {
					t.Errorf("Dockerfile:%d: %s", in.line, why)
				}
				if (in.cmd == "COPY" || in.cmd == "ADD") && secretPathRE.MatchString(in.args) {
					t.Errorf("Dockerfile:%d: %s %q brings secret material into the image", in.line, in.cmd, in.args)
				}
			}
		}
	})
}

func TestDockerignore(t *testing.T) {
	pats := dockerignore(t)
	for _, want := range []string{".git", "bin", "secrets", ".env", "data", "tmp"} {
		if !slices.ContainsFunc(pats, func(p string) bool { return strings.Trim(p, "/") == want }) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

func dockerignore(t *testing.T) []string {
	t.Helper()
	var pats []string
	for line := range strings.SplitSeq(string(readFile(t, ".dockerignore")), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			pats = append(pats, line)
		}
	}
	return pats
}

// dockerfileUID returns the numeric user of the Dockerfile's last stage.
func dockerfileUID(t *testing.T) (int, bool) {
	t.Helper()
	stages := parseDockerfile(t)
	if len(stages) == 0 {
		return 0, false
	}
	user := ""
	for _, in := range stages[len(stages)-1].instrs {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	u, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(u)
	return n, err == nil
}

func execForm(t *testing.T, in dockerInstr) []string {
	t.Helper()
	var l []string
	if err := yaml.Unmarshal([]byte(in.args), &l); err != nil || !strings.HasPrefix(in.args, "[") {
		t.Errorf("Dockerfile:%d: %s %s: want the exec (JSON) form, so signals reach the process", in.line, in.cmd, in.args)
	}
	return l
}

func instrText(st dockerStage) string {
	var b strings.Builder
	for _, in := range st.instrs {
		b.WriteString(in.cmd + " " + in.args + "\n")
	}
	return b.String()
}

// envNames returns the names an ENV or ARG instruction sets.
func envNames(args string) []string {
	var names []string
	for _, f := range strings.Fields(args) {
		k, _, _ := strings.Cut(f, "=")
		if envNameRE.MatchString(k) {
			names = append(names, k)
		}
	}
	return names
}

func goModVersion(t *testing.T) string {
	t.Helper()
	for line := range strings.SplitSeq(string(readFile(t, "go.mod")), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod: no go directive")
	return ""
}

// ---------------------------------------------------------------------------
// README

func TestReadme(t *testing.T) {
	text := string(readFile(t, "deploy/README.md"))
	for _, want := range []string{"--scale worker=", "docker compose run --rm producer", "kubectl", "create secret", "8222", "KEDA"} {
		if !strings.Contains(text, want) {
			t.Errorf("deploy/README.md does not mention %q", want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	for _, f := range files {
		if !strings.Contains(text, filepath.Base(f)) {
			t.Errorf("deploy/README.md does not say how to use %s", filepath.Base(f))
		}
	}
}

// ---------------------------------------------------------------------------
// helpers

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return b
}

// splitImage splits an image reference into repository and tag.
func splitImage(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// pinnedTag reports whether an image tag names at least a major version
// (2, 2.15, 7.4-alpine, 3.24), not latest or a bare variant.
func pinnedTag(tag string) bool {
	return pinnedTagRE.MatchString(tag)
}

// flagValue returns the value of the first of names in argv, given as
// "-f v" or "-f=v".
func flagValue(argv []string, names ...string) string {
	for i, a := range argv {
		for _, n := range names {
			if a == n && i+1 < len(argv) {
				return argv[i+1]
			}
			if v, ok := strings.CutPrefix(a, n+"="); ok {
				return v
			}
		}
	}
	return ""
}

// mentionsPort reports whether a compose ports or expose list holds the
// container port p.
func mentionsPort(list []any, p string) bool {
	for _, e := range list {
		switch v := e.(type) {
		case int:
			if strconv.Itoa(v) == p {
				return true
			}
		case string:
			parts := strings.Split(v, ":")
			target, _, _ := strings.Cut(parts[len(parts)-1], "/")
			if target == p {
				return true
			}
		case map[string]any:
			if fmt.Sprint(v["target"]) == p {
				return true
			}
		}
	}
	return false
}

// mainProgram returns the program an entrypoint runs, past an init such as
// tini --.
func mainProgram(argv []string) string {
	if i := slices.Index(argv, "--"); i >= 0 && i+1 < len(argv) {
		argv = argv[i+1:]
	}
	if len(argv) == 0 {
		return ""
	}
	return path.Base(argv[0])
}

func listenHostPort(t *testing.T, listen string) (string, string) {
	t.Helper()
	if listen == "" {
		t.Fatalf("worker.listen is empty: no /metrics, /healthz or /readyz to probe")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("worker.listen %q: %v", listen, err)
	}
	return host, port
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
