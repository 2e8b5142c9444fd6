package gateway

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
)

const installSDK = "bash scripts/ensure-node-packages.sh (from the repository's root)"

// An application points the official SDKs at a worker's gateway (base
// URL and a gateway token) and gets its answers, streamed and not; a
// missing or wrong token gets 401 in the provider's shape, and nothing
// reaches the API. The worker's /metrics counts the requests, and its
// heartbeat shows the gateway's traffic in `producer status` (what the
// dashboard shows beside the batches).
func TestOfficialSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: the gateway's SDK check needs Node.js (20 or later); install it, then run %s", installSDK)
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join("sdk", "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("sdk/node_modules/%s is missing: run %s", pkg, installSDK)
		}
	}
	f := newFleet(t, options{})
	f.startWorker("w1")

	// No token, a wrong one, the API key itself: 401, nothing sent.
	for _, c := range []struct {
		name, path, body string
		headers          []string
		shape            string
	}{
		{"no token", "/chat/v1/chat/completions", chatBody, nil, `"code":"invalid_api_key"`},
		{"a wrong token", "/chat/v1/chat/completions", chatBody, []string{"Authorization", "Bearer not-a-token"}, `"type":"invalid_request_error"`},
		{"a key's own secret", "/chat/v1/chat/completions", chatBody, []string{"Authorization", "Bearer " + keySecrets["key-a"]}, `"code":"invalid_api_key"`},
		{"Anthropic, a wrong token", "/claude/v1/messages", claudeBody, []string{"x-api-key", "nope", "anthropic-version", "2023-06-01"},
			`{"type":"error","error":{"type":"authentication_error"`},
	} {
		got := post(t, f.gateway+c.path, c.body, c.headers...)
		if got.status != 401 || !strings.Contains(got.body, c.shape) {
			t.Errorf("%s: %d %s, want 401 with %s", c.name, got.status, got.body, c.shape)
		}
	}
	if n := len(f.oa.Received()) + len(f.an.Received()); n != 0 {
		t.Fatalf("the APIs got %d requests from callers without a valid token", n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "gateway.mjs")
	cmd.Dir = "sdk"
	cmd.Env = append(os.Environ(),
		"GW_OPENAI_URL="+f.gateway+"/chat/v1", "GW_ANTHROPIC_URL="+f.gateway+"/claude", "GW_TOKEN="+appToken,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost", "OPENAI_LOG=off", "ANTHROPIC_LOG=off")
	out, err := cmd.CombinedOutput()
	t.Logf("node gateway.mjs:\n%s", out)
	if err != nil || !strings.Contains(string(out), " 0 failed") {
		t.Fatalf("the SDK check failed (%v): the FAIL lines above say where", err)
	}
	// Every request the SDKs made reached the API with a key's secret,
	// never the caller's token.
	for _, r := range append(f.oa.Received(), f.an.Received()...) {
		if r.KeyIndex < 0 || strings.Contains(r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"), appToken) {
			t.Fatalf("the API got %s %s with key %d and headers %v", r.Method, r.Path, r.KeyIndex, r.Header)
		}
	}

	m := f.metrics()
	for _, want := range []string{
		`keyfleet_gateway_requests_total{kind="chat",status="200"}`,
		`keyfleet_gateway_requests_total{kind="claude",status="200"}`,
		`keyfleet_gateway_requests_total{kind="chat",status="401"}`,
		`keyfleet_gateway_key_wait_seconds_count`,
		`keyfleet_gateway_added_latency_seconds_count`,
	} {
		if v := metricLine(m, want); v == "" || v == "0" {
			t.Errorf("/metrics has no %s (or 0)", want)
		}
	}
	// The heartbeat carries the gateway's figures to status and the dashboard.
	testutil.WaitFor(t, "status to show the gateway's requests", time.Minute, func() bool {
		_, raw := f.StatusJSON()
		var st struct {
			Workers []struct {
				ID      string `json:"id"`
				Gateway *struct {
					Listen   string `json:"listen"`
					Requests int64  `json:"requests"`
				} `json:"gateway"`
			} `json:"workers"`
		}
		if json.Unmarshal([]byte(raw), &st) != nil || len(st.Workers) != 1 || st.Workers[0].Gateway == nil {
			return false
		}
		g := st.Workers[0].Gateway
		return g.Listen == f.gwListen && g.Requests >= 14
	})
	if logs := f.Logs(); strings.Contains(logs, appToken) || strings.Contains(logs, keySecrets["key-a"]) {
		t.Fatal("a token or a secret reached the logs")
	}
}
