package gateway

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Kind is one provider kind the gateway serves: where its requests go
// and with what auth, and the keys they may use.
type Kind struct {
	// Name is the kind's name (jobs.kinds.<name>, or http): the first
	// segment of its paths.
	Name string
	// Provider is the API it speaks (provider.OpenAI, provider.Anthropic,
	// provider.OpenAICompatible).
	Provider string
	// BaseURL is the API's base (the kind's url, else the provider's); a
	// key's own url replaces it (Config.URLs).
	BaseURL string
	// AuthHeader and AuthFormat carry the key's secret ({secret}).
	AuthHeader, AuthFormat string
	// Headers are the kind's configured headers: they replace the
	// caller's. ProviderHeaders are the provider's own
	// (anthropic-version): set only when the caller sent none.
	Headers, ProviderHeaders map[string]string
	// Keys are the keys its requests may use (nil: every key of the
	// pool handle's).
	Keys *creds.KeySet
	// Timeout bounds the wait for the API's reply headers (the kind's
	// http.timeout); a streamed body then flows as long as it lasts.
	Timeout time.Duration
}

// KindsFrom are the kinds of cfg the gateway serves (config.GatewayKinds),
// each with its key set from keys (by kind; a kind not in it may use
// every key).
func KindsFrom(cfg *config.Config, keys map[string]*creds.KeySet) []Kind {
	var out []Kind
	for _, name := range cfg.GatewayKinds() {
		_, sec, _ := cfg.Jobs.KindSection(name)
		h, ok := sec.(*config.HTTPJob)
		if !ok || h == nil {
			continue
		}
		spec, _ := provider.Lookup(h.Provider)
		d := h.WithDefaults()
		k := Kind{
			Name: name, Provider: spec.Name, BaseURL: d.URL, AuthHeader: d.Header, AuthFormat: d.Format,
			Headers: maps.Clone(h.Headers), ProviderHeaders: maps.Clone(spec.Headers), Keys: keys[name],
			Timeout: cmp.Or(d.Timeout, jobs.HTTPTimeoutDefault),
		}
		out = append(out, k)
	}
	return out
}

// route is what a path asks for: the endpoint of a kind, or of one kind
// among several (ambiguous: the path without /<kind> that more than one
// kind serves).
type route struct {
	endpoint  string
	kind      *Kind
	ambiguous []string // the kinds that serve the path, when it names none of them
	anthropic bool     // the provider's error shape
}

// routes builds the table of paths: /<kind><endpoint> for every
// endpoint of every kind's provider, and <endpoint> alone, for the one
// kind that serves it (ambiguous when several do).
func routes(kinds []Kind) (map[string]*route, error) {
	table := map[string]*route{}
	bare := map[string][]*Kind{}
	for i := range kinds {
		k := &kinds[i]
		spec, ok := provider.Lookup(k.Provider)
		if !ok {
			return nil, fmt.Errorf("gateway: kind %s: %w", k.Name, provider.Check(k.Provider))
		}
		if strings.ContainsAny(k.Name, "/?#") || k.Name == "" {
			return nil, fmt.Errorf("gateway: kind %q cannot be a path segment", k.Name)
		}
		for _, ep := range spec.Endpoints {
			table["/"+k.Name+ep] = &route{endpoint: ep, kind: k, anthropic: spec.IsAnthropic()}
			bare[ep] = append(bare[ep], k)
		}
	}
	for ep, ks := range bare {
		if _, taken := table[ep]; taken {
			continue // a kind named v1 has /v1/v1/...; /v1/... stays the bare path's
		}
		spec, _ := provider.Lookup(ks[0].Provider)
		r := &route{endpoint: ep, anthropic: spec.IsAnthropic()}
		if len(ks) == 1 {
			r.kind = ks[0]
		} else {
			for _, k := range ks {
				r.ambiguous = append(r.ambiguous, k.Name)
			}
			slices.Sort(r.ambiguous)
		}
		table[ep] = r
	}
	return table, nil
}

// anthropicPath reports whether a path no route serves is Anthropic's
// (its errors are answered in Anthropic's shape).
func anthropicPath(path string) bool {
	return strings.HasSuffix(path, "/v1/messages") || strings.Contains(path, "/v1/messages/")
}
