package gateway

import (
	"crypto/sha256"
	"net/http"
	"strings"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// Token is one caller of the gateway: its token and the tenant its
// requests belong to ("" none).
type Token struct {
	Token  secret.Secret
	Tenant string
}

// tokens finds a request's tenant by its token. They are kept by their
// SHA-256, so that a lookup compares digests, not the tokens themselves
// (no timing reveals how much of a guess was right).
type tokens map[[sha256.Size]byte]string

func newTokens(ts []Token) tokens {
	out := make(tokens, len(ts))
	for _, t := range ts {
		out[sha256.Sum256([]byte(t.Token.Reveal()))] = t.Tenant
	}
	return out
}

// callerHeaders are the request headers that carry the caller's
// credentials (the gateway token as the SDKs send their API key, and
// what would pick another organization or project for the key): none of
// them goes to the API.
var callerHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "Openai-Organization", "Openai-Project", "Proxy-Authorization"}

// tenantOf is the tenant of the request's token, the SDKs' way of
// sending an API key (Authorization: Bearer <token>, x-api-key: <token>);
// ok is false when neither holds a token of the gateway's. given says
// whether the request carried any.
func (ts tokens) tenantOf(r *http.Request) (tenant string, ok, given bool) {
	if v := r.Header.Get("Authorization"); v != "" {
		given = true
		if scheme, tok, found := strings.Cut(v, " "); found && strings.EqualFold(scheme, "Bearer") {
			if tenant, ok = ts[sha256.Sum256([]byte(strings.TrimSpace(tok)))]; ok {
				return tenant, true, true
			}
		}
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		given = true
		if tenant, ok = ts[sha256.Sum256([]byte(strings.TrimSpace(v)))]; ok {
			return tenant, true, true
		}
	}
	return "", false, given
}
