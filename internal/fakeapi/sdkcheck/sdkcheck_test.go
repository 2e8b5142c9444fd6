package sdkcheck_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

const install = "npm ci --prefix internal/fakeapi/sdkcheck (from the repository's root)"

// TestOfficialSDKs runs check.mjs against strict servers of both
// providers.
func TestOfficialSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: the SDK check needs Node.js (20 or later) and the pinned SDKs; install Node.js, then run %s", install)
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join("node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("node_modules/%s is missing: run %s", pkg, install)
		}
	}
	oa := serve(t, fakeapi.ProviderOpenAI, "sk-sdkcheck-openai-key-0001")
	an := serve(t, fakeapi.ProviderAnthropic, "sk-ant-sdkcheck-key-0001")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs")
	cmd.Env = append(os.Environ(),
		"FAKEAPI_OPENAI_URL="+oa+"/v1", "FAKEAPI_OPENAI_KEY=sk-sdkcheck-openai-key-0001",
		"FAKEAPI_ANTHROPIC_URL="+an, "FAKEAPI_ANTHROPIC_KEY=sk-ant-sdkcheck-key-0001",
		// The SDKs must reach the servers directly.
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"OPENAI_LOG=off", "ANTHROPIC_LOG=off",
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node check.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the SDK check failed (%v); the FAIL lines above say where the stand-in and the official SDKs disagree", err)
	}
	if !strings.Contains(string(out), " 0 failed") {
		t.Fatal("the SDK check did not report its count")
	}
}

// serve starts a strict server of provider with one key. Its latency
// spreads a streamed reply's events over 40 ms, so that the SDKs read
// streams that arrive in pieces, as the APIs send them.
func serve(t *testing.T, provider, secret string) string {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{
		Provider:   provider,
		Keys:       []fakeapi.Key{{Secret: secret}},
		BatchDelay: 300 * time.Millisecond,
		Latency:    40 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv.URL
}
