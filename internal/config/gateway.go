package config

import (
	"crypto/subtle"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Gateway is the interactive gateway (docs/gateway.md): a worker with
// Listen set also serves the providers' own HTTP APIs (POST
// /<kind>/v1/chat/completions, /<kind>/v1/messages, ...) for every kind
// that names a provider, on the same keys and limits as the batches, ahead
// of every batch item.
type Gateway struct {
	// Listen is the address the gateway serves, such as
	// "127.0.0.1:8090" or ":8090". Default "" (off). Any number of
	// workers may serve it, behind any load balancer.
	Listen string `yaml:"listen"`
	// Tokens are who may call the gateway, and as which tenant: a
	// request's Authorization: Bearer <token> or x-api-key: <token> must
	// be one of them. Required with Listen. Default none.
	Tokens []GatewayToken `yaml:"tokens"`
	// MaxWait is the longest a request waits for a key (429s from keys
	// retried on others included) before it gets a 429 with Retry-After.
	// Default GatewayMaxWaitDefault (30s).
	MaxWait time.Duration `yaml:"max_wait"`
	// Reserve is the share of every limit of keys and accounts that
	// batches leave free for the gateway's requests, 0 to
	// creds.ReserveMax (the pool's creds.Definitions.Reserve). Every
	// worker applies it, whether it serves the gateway or not. Default 0.
	Reserve float64 `yaml:"reserve"`
}

// GatewayMaxWaitDefault is the default of gateway.max_wait.
const GatewayMaxWaitDefault = 30 * time.Second

// GatewayToken is one caller of the gateway.
type GatewayToken struct {
	// TokenEnv is the environment variable holding the token (never the
	// token itself). Required.
	TokenEnv string `yaml:"token_env"`
	// Tenant is the tenant the token's requests belong to: its budget
	// and weight apply, and its spend counts them. Default "" (none).
	Tenant string `yaml:"tenant"`
}

// checkGateway checks the gateway section: an address, tokens that name
// variables, a tenant name, a wait and a reserve in range; with listen,
// at least one token and one kind with a provider to serve.
func (c *Config) checkGateway(ps *check.List) {
	g := c.Gateway
	if g.Listen != "" {
		_, port, err := net.SplitHostPort(g.Listen)
		if err != nil || port == "" {
			ps.Add("gateway.listen", "%s is not host:port, e.g. 127.0.0.1:8090 or :8090", check.Quote(g.Listen))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			ps.Add("gateway.listen", "port %s is not a number from 0 to 65535", check.Quote(port))
		}
		if len(c.GatewayKinds()) == 0 {
			ps.Add("gateway.listen", "is set, but no job kind names a provider (jobs.kinds.<name>.http.provider): the gateway would serve nothing")
		}
		if len(g.Tokens) == 0 {
			ps.Add("gateway.tokens", "lists no token: with gateway.listen set, nobody could call the gateway; add {token_env: NAME, tenant: T}")
		}
	}
	seen := map[string]int{}
	for i, t := range g.Tokens {
		key := fmt.Sprintf("gateway.tokens[%d]", i)
		switch {
		case t.TokenEnv == "":
			ps.Add(key+".token_env", "must be set: the environment variable holding the token")
		case !jobs.ValidEnvName(t.TokenEnv):
			// Not quoted: a token pasted here by mistake must not be printed.
			ps.Add(key+".token_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); "+
				"it names the variable that holds the token, not the token itself")
		default:
			if j, dup := seen[t.TokenEnv]; dup {
				ps.Add(key+".token_env", "%s is used twice (also gateway.tokens[%d])", t.TokenEnv, j)
			} else {
				seen[t.TokenEnv] = i
			}
		}
		if t.Tenant != "" {
			if err := queue.CheckTenant(t.Tenant); err != nil {
				ps.Add(key+".tenant", "%v", err)
			}
		}
	}
	ps.Positive("gateway.max_wait", g.MaxWait)
	if !(g.Reserve >= 0 && g.Reserve <= creds.ReserveMax) {
		ps.Add("gateway.reserve", "must be from 0 to %g (the share of every limit batches leave to the gateway), got %v", creds.ReserveMax, g.Reserve)
	}
}

// GatewayKinds are the kinds the gateway serves: every configured kind
// that names a provider (named kinds and jobs.http), sorted.
func (c *Config) GatewayKinds() []string {
	var out []string
	for _, name := range append([]string{jobs.KindHTTP}, c.Jobs.KindNames()...) {
		if c.Jobs.KindProvider(name) != "" {
			out = append(out, name)
		}
	}
	return out
}

// CheckGatewayTokens reports every gateway token a worker could not read
// (what ResolveGatewayTokens refuses), keyed by its token_env, without
// keeping or quoting a token. Only a worker that serves the gateway
// (gateway.listen set) reads them.
func (c *Config) CheckGatewayTokens(getenv func(string) string) check.List {
	_, ps := c.gatewayTokens(getenv)
	return ps
}

// ResolveGatewayTokens reads every gateway token from its token_env
// (through getenv; os.Getenv when nil) and returns them with their
// tenants, in config order. An unset or empty variable, or two variables
// holding the same token (its tenant would be ambiguous), is an error
// naming the key and the variable, never the token. Nil when the gateway
// is off.
func (c *Config) ResolveGatewayTokens(getenv func(string) string) ([]ResolvedToken, error) {
	out, ps := c.gatewayTokens(getenv)
	return out, fromList(ps, nil, nil).err(c.Source, nil)
}

// ResolvedToken is a gateway token read from its variable.
type ResolvedToken struct {
	Token  secret.Secret
	Tenant string
}

func (c *Config) gatewayTokens(getenv func(string) string) ([]ResolvedToken, check.List) {
	if c.Gateway.Listen == "" {
		return nil, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	var ps check.List
	var out []ResolvedToken
	var vars []string
	for i, t := range c.Gateway.Tokens {
		if !jobs.ValidEnvName(t.TokenEnv) {
			continue // Validate's to report
		}
		key := fmt.Sprintf("gateway.tokens[%d].token_env", i)
		v := getenv(t.TokenEnv)
		if strings.TrimSpace(v) == "" {
			ps.Add(key, "environment variable %s is not set or is empty", t.TokenEnv)
			continue
		}
		if j := sameToken(out, v); j >= 0 {
			ps.Add(key, "environment variable %s holds the same token as %s: each token names one tenant", t.TokenEnv, vars[j])
			continue
		}
		out = append(out, ResolvedToken{Token: secret.New(v), Tenant: t.Tenant})
		vars = append(vars, t.TokenEnv)
	}
	return out, ps
}

// sameToken is the index of the token of out equal to v, -1 when none.
func sameToken(out []ResolvedToken, v string) int {
	for i, t := range out {
		if subtle.ConstantTimeCompare([]byte(t.Token.Reveal()), []byte(v)) == 1 {
			return i
		}
	}
	return -1
}
