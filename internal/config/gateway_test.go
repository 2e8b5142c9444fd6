package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// gatewayKinds is a jobs section with an OpenAI and an Anthropic kind.
const gatewayKinds = "jobs:\n  kinds:\n    chat: {http: {provider: openai}}\n    claude: {http: {provider: anthropic}}\n"

func TestGatewayDefaultsAndKinds(t *testing.T) {
	path := writeFile(t, "kf.yaml", gatewayKinds+"  http: {url: \"https://api.example.com/x\"}\n"+
		"gateway:\n  listen: 127.0.0.1:8090\n  tokens:\n    - {token_env: APP_TOKEN, tenant: support}\n    - {token_env: OPS_TOKEN}\n")
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.MaxWait != 30*time.Second || c.Gateway.Reserve != 0 || len(c.Gateway.Tokens) != 2 {
		t.Fatalf("gateway: %+v", c.Gateway)
	}
	if got := strings.Join(c.GatewayKinds(), ","); got != "chat,claude" {
		t.Fatalf("GatewayKinds: %s, want chat,claude (the http kind names no provider)", got)
	}
}

// Every mistake in the gateway section is one line naming its key and
// line; a token is never printed.
func TestGatewayErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "listen without tokens or provider kinds",
			yaml: "gateway:\n  listen: 127.0.0.1:8090\n",
			want: []string{
				`config: FILE: line 2: gateway.listen: is set, but no job kind names a provider (jobs.kinds.<name>.http.provider): the gateway would serve nothing`,
				`config: FILE: line 1: gateway.tokens: lists no token: with gateway.listen set, nobody could call the gateway; add {token_env: NAME, tenant: T}`,
			},
		},
		{
			name: "bad address, a pasted token, a twice-used variable, a bad tenant, wait and reserve",
			yaml: gatewayKinds + "gateway:\n  listen: localhost\n  tokens:\n    - {token_env: sk-live-123}\n    - {token_env: APP}\n" +
				"    - {token_env: APP, tenant: \"a b\"}\n  max_wait: 0s\n  reserve: 0.95\n",
			want: []string{
				`config: FILE: line 6: gateway.listen: "localhost" is not host:port, e.g. 127.0.0.1:8090 or :8090`,
				`config: FILE: line 8: gateway.tokens[0].token_env: is not an environment variable name (letters, digits and '_', not starting with a digit); it names the variable that holds the token, not the token itself`,
				`config: FILE: line 10: gateway.tokens[2].token_env: APP is used twice (also gateway.tokens[1])`,
				`config: FILE: line 10: gateway.tokens[2].tenant: tenant "a b": want 1 to 64 letters, digits, '_', '.' or '-'`,
				`config: FILE: line 11: gateway.max_wait: must be more than 0, got 0s`,
				`config: FILE: line 12: gateway.reserve: must be from 0 to 0.9 (the share of every limit batches leave to the gateway), got 0.95`,
			},
		},
		{
			name: "unknown key",
			yaml: "gateway:\n  tokens:\n    - {token_env: A, tennant: x}\n",
			want: []string{`config: FILE: line 3: unknown key "gateway.tokens[0].tennant" (did you mean "tenant"?)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "kf.yaml", tt.yaml)
			_, err := config.Load(path, env(nil))
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE", path)
			if err == nil || err.Error() != want {
				t.Fatalf("error mismatch\nwant:\n%s\ngot:\n%v", want, err)
			}
			if strings.Contains(err.Error(), "sk-live-123") {
				t.Fatal("the error prints what looks like a token")
			}
		})
	}
}

// The tokens are read from their variables only when the gateway is on;
// an unset one and two holding the same token are problems on their
// lines, never printing a token.
func TestGatewayTokens(t *testing.T) {
	path := writeFile(t, "kf.yaml", gatewayKinds+"gateway:\n  listen: :0\n  tokens:\n"+
		"    - {token_env: APP, tenant: support}\n    - {token_env: MISSING}\n    - {token_env: SAME}\n")
	vars := env(map[string]string{"APP": "tok-app-secret-1", "SAME": "tok-app-secret-1"})
	l, err := config.Read(path, vars)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	got := errLines(l.Problems(l.Config.CheckGatewayTokens(vars)))
	want := []string{
		"config: " + path + ": line 9: gateway.tokens[1].token_env: environment variable MISSING is not set or is empty",
		"config: " + path + ": line 10: gateway.tokens[2].token_env: environment variable SAME holds the same token as APP: each token names one tenant",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if _, err := l.Config.ResolveGatewayTokens(vars); err == nil || strings.Contains(err.Error(), "tok-app") {
		t.Fatalf("ResolveGatewayTokens: %v", err)
	}
	toks, err := l.Config.ResolveGatewayTokens(env(map[string]string{"APP": "a1", "MISSING": "m1", "SAME": "s1"}))
	if err != nil || len(toks) != 3 || toks[0].Tenant != "support" || toks[0].Token.Reveal() != "a1" || toks[1].Tenant != "" {
		t.Fatalf("ResolveGatewayTokens: %+v %v", toks, err)
	}
	l.Config.Gateway.Listen = ""
	if ps := l.Config.CheckGatewayTokens(vars); len(ps) != 0 {
		t.Fatalf("the gateway off: no token is read, got %v", ps)
	}
}
