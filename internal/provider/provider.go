// Package provider holds what keyfleet knows of the LLM providers' own
// APIs (docs/providers.md): for a kind that names its provider (http:
// {provider: openai | anthropic | openai-compatible}), the base URL, the
// auth header, the endpoint, the probe, the rate-limit headers, how a
// reply says what it used, the item's scope (its model) and the estimate
// of a request's tokens; and the providers' batch file formats, in
// (Parse) and out (the results writers in results.go).
//
// Each provider is one Spec value: a new provider is one more entry of
// specs.
package provider

import (
	"fmt"
	"slices"
	"strings"
)

// The providers a kind may name.
const (
	OpenAI           = "openai"
	Anthropic        = "anthropic"
	OpenAICompatible = "openai-compatible"
)

// Spec is one provider's API as keyfleet speaks it.
type Spec struct {
	// Name is the provider's name in the config.
	Name string
	// BaseURL is the API's base (scheme and host, no path): the kind's
	// url, or a key's own url, replaces it. "" means url is required.
	BaseURL string
	// AuthHeader carries the key, as AuthFormat says ({secret}).
	AuthHeader, AuthFormat string
	// Headers are sent with every request (unless the kind sets them).
	Headers map[string]string
	// Endpoint is the path a request goes to unless its line names one
	// (an OpenAI batch line's url).
	Endpoint string
	// Endpoints are the paths an OpenAI batch line may name.
	Endpoints []string
	// ProbePath is where a disabled key is probed (GET).
	ProbePath string
	// RequestIDHeader names the reply header holding the API's request ID.
	RequestIDHeader string
	// BatchFormat is the item and result format of the provider's Batch
	// API (FormatOpenAIBatch, FormatAnthropicBatch).
	BatchFormat string
	// HasBatchAPI: the provider runs batches of requests at a discount
	// (OpenAI Batch, Anthropic Message Batches); an OpenAI-compatible
	// server may not.
	HasBatchAPI bool
}

var specs = []Spec{
	openAIAPI(OpenAI, "https://api.openai.com", true),
	// url is required: the server's own (vLLM, Azure, a gateway).
	openAIAPI(OpenAICompatible, "", false),
	{
		Name: Anthropic, BaseURL: "https://api.anthropic.com",
		AuthHeader: "x-api-key", AuthFormat: "{secret}",
		Headers:         map[string]string{"anthropic-version": AnthropicVersion},
		Endpoint:        "/v1/messages",
		Endpoints:       []string{"/v1/messages"},
		ProbePath:       "/v1/models",
		RequestIDHeader: "request-id",
		BatchFormat:     FormatAnthropicBatch,
		HasBatchAPI:     true,
	},
}

// openAIAPI is OpenAI's API as the provider name serves it at baseURL
// (with or without a Batch API).
func openAIAPI(name, baseURL string, hasBatchAPI bool) Spec {
	return Spec{
		Name: name, BaseURL: baseURL,
		AuthHeader: "Authorization", AuthFormat: "Bearer {secret}",
		Endpoint:        "/v1/chat/completions",
		Endpoints:       []string{"/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"},
		ProbePath:       "/v1/models",
		RequestIDHeader: "x-request-id",
		BatchFormat:     FormatOpenAIBatch,
		HasBatchAPI:     hasBatchAPI,
	}
}

// ScopeField is a request's field that is its item's scope: the model.
const ScopeField = "model"

// AnthropicVersion is the anthropic-version header keyfleet sends.
const AnthropicVersion = "2023-06-01"

// Lookup returns the provider called name.
func Lookup(name string) (Spec, bool) {
	i := slices.IndexFunc(specs, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, false
	}
	return specs[i], true
}

// Names lists the providers a kind may name.
func Names() []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

// Check reports whether name is a provider, naming them when it is not.
func Check(name string) error {
	if _, ok := Lookup(name); !ok {
		return fmt.Errorf("unknown provider %q (want %s)", name, strings.Join(Names(), ", "))
	}
	return nil
}

// IsAnthropic reports whether the provider speaks Anthropic's formats.
func (s Spec) IsAnthropic() bool { return s.Name == Anthropic }

// URL is the address a request of endpoint goes to, from base (a key's
// own url, else the kind's, else the provider's). A base given the way
// the official SDKs take it, ending in /v1 (OPENAI_BASE_URL), is the same
// base: the endpoint's /v1 is not doubled.
func URL(base, endpoint string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") && strings.HasPrefix(endpoint, "/v1/") {
		base = strings.TrimSuffix(base, "/v1")
	}
	return base + endpoint
}
