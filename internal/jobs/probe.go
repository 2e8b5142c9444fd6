package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// Probes: how a kind finds out whether a key the API disabled works again.
// A kind whose section implements Probing can probe; the worker asks the
// sections of the kinds a key serves, every pool.probe_interval, and a
// success enables the key again.

// Prober checks one credential.
type Prober interface {
	// Probe tries cred. It returns what showed that the key works (the
	// cause kept with the key: "probe GET https://api.example.com/v1/models
	// answered 200"), or an error saying why it does not, with secrets
	// scrubbed. It returns by ctx's end.
	Probe(ctx context.Context, cred Credential) (cause string, err error)
}

// Probing is a kind's section that can probe its keys.
type Probing interface {
	Section
	// HasProbe reports whether the section configures a probe.
	HasProbe() bool
	// NewProber returns the section's prober (after its defaults), each
	// probe bounded by timeout, with the settings every handler gets.
	// It fails when the section configures no probe.
	NewProber(common Common, timeout time.Duration) (Prober, error)
}

// ProbeMaxOutput bounds what a probe's reply or output keeps, for its
// error text.
const ProbeMaxOutput = 4 << 10

var errNoProbe = errors.New("no probe configured")

var (
	_ Probing = (*HTTPConfig)(nil)
	_ Probing = (*ExecConfig)(nil)
)

// HasProbe reports whether ProbeURL is set, or a provider (which probes
// its base's /v1/models).
func (c *HTTPConfig) HasProbe() bool { return c.ProbeURL != "" || c.Provider != "" }

// NewProber returns the http kind's probe: a GET of ProbeURL with the key
// in Header (formatted by Format) and Headers, redirects not followed; 2xx
// means the key works.
func (c *HTTPConfig) NewProber(common Common, timeout time.Duration) (Prober, error) {
	if !c.HasProbe() {
		return nil, fmt.Errorf("http: probe_url: %w", errNoProbe)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("http: probe timeout must be positive, got %s", timeout)
	}
	cfg := c.WithDefaults()
	cfg.Scrubber = common.Scrubber
	if err := checkSettings("http", cfg.Check(), 0); err != nil {
		return nil, err
	}
	p := &httpProber{cfg: cfg, headers: make(http.Header, len(cfg.Headers)), timeout: timeout, client: cmp.Or(cfg.Client, noRedirectClient)}
	for name, value := range cfg.Headers {
		p.headers.Set(name, value)
	}
	return p, nil
}

type httpProber struct {
	cfg     HTTPConfig
	headers http.Header
	timeout time.Duration
	client  *http.Client
}

func (p *httpProber) Probe(ctx context.Context, cred Credential) (string, error) {
	target := p.cfg.ProbeURL
	if spec, ok := provider.Lookup(p.cfg.Provider); ok && cred.URL != "" {
		// A key with its own base is probed there.
		target = provider.URL(cred.URL, spec.ProbePath)
	}
	what := "probe GET " + secret.RedactURL(target)
	auth := strings.ReplaceAll(p.cfg.Format, secretPlaceholder, cred.Secret.Reveal())
	if !validHeaderValue(auth) {
		return "", fmt.Errorf("%s: the secret contains control characters and cannot be sent in a header", what)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	for name, values := range p.headers {
		req.Header[name] = slices.Clone(values)
	}
	req.Header.Set(p.cfg.Header, auth)
	resp, err := p.client.Do(req)
	if err != nil {
		// The transport's errors name the URL, never a header.
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, ProbeMaxOutput))
	_, _ = io.CopyN(io.Discard, resp.Body, httpDrainMax)
	status := statusText(resp.StatusCode)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return what + " answered " + status, nil
	}
	if snip := snippet(raw, scrubberFor(p.cfg.Scrubber, cred)); snip != "" {
		status += ": " + snip
	}
	return "", fmt.Errorf("%s answered %s", what, status)
}

// HasProbe reports whether ProbeCommand is set.
func (c *ExecConfig) HasProbe() bool { return len(c.ProbeCommand) > 0 }

// NewProber returns the exec kind's probe: ProbeCommand, run as a job is
// (Dir, Env, the worker's environment minus every secret_env, its own
// process group, killed with it on timeout and when the worker dies), with the key in
// KEYFLEET_CREDENTIAL_ID and KEYFLEET_CREDENTIAL_SECRET, an empty stdin
// and an empty item (KEYFLEET_ITEM_ID and KEYFLEET_BATCH empty,
// KEYFLEET_ATTEMPT 0); exit 0 means the key works. Its errors quote the end
// of its stderr, scrubbed.
func (c *ExecConfig) NewProber(common Common, timeout time.Duration) (Prober, error) {
	if !c.HasProbe() {
		return nil, fmt.Errorf("exec: probe_command: %w", errNoProbe)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("exec: probe timeout must be positive, got %s", timeout)
	}
	cfg := *c
	cfg.Command, cfg.ProbeCommand, cfg.Timeout = c.ProbeCommand, nil, timeout
	cfg.Persistent = false // a probe is a process per probe, whatever the jobs are
	cfg.MaxOutput, cfg.Scrubber, cfg.ScrubEnv, cfg.Guard = ProbeMaxOutput, common.Scrubber, common.ScrubEnv, common.Guard
	h, err := NewExec(cfg)
	if err != nil {
		return nil, fmt.Errorf("probe_command: %w", err)
	}
	return &execProber{h: h}, nil
}

type execProber struct{ h Handler }

func (p *execProber) Probe(ctx context.Context, cred Credential) (string, error) {
	if _, err := p.h.Run(ctx, Item{Kind: KindExec}, cred); err != nil {
		return "", fmt.Errorf("probe_command: %w", err)
	}
	return "probe_command exited 0", nil
}
