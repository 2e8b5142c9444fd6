package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// apiError is an answer of the gateway's own in the provider's error
// shape: OpenAI's {"error": {"message", "type", "param", "code"}}
// (param and code null when not given), Anthropic's {"type": "error",
// "error": {"type", "message"}}, as the official SDKs read them
// (openai-node's APIError, anthropic-sdk-typescript's; the strict
// fakeapi answers in the same shapes).
type apiError struct {
	status int
	// openaiType and openaiCode are OpenAI's error type and code ("":
	// null); anthropicType is Anthropic's error type.
	openaiType, openaiCode string
	anthropicType          string
	message                string
	// retryAfter, when above 0, is sent as Retry-After (whole seconds,
	// rounded up) and retry-after-ms.
	retryAfter time.Duration
	// noRetry sends x-should-retry: false: the official SDKs do not
	// retry what no wait cures.
	noRetry bool
}

// The gateway's answers.
func unauthorized(message string) *apiError {
	return &apiError{status: http.StatusUnauthorized, openaiType: "invalid_request_error", openaiCode: "invalid_api_key",
		anthropicType: "authentication_error", message: message}
}

func notFound(message string) *apiError {
	return &apiError{status: http.StatusNotFound, openaiType: "invalid_request_error", anthropicType: "not_found_error", message: message}
}

func badRequest(message string) *apiError {
	return &apiError{status: http.StatusBadRequest, openaiType: "invalid_request_error", anthropicType: "invalid_request_error", message: message}
}

func rateLimited(message string, retryAfter time.Duration) *apiError {
	return &apiError{status: http.StatusTooManyRequests, openaiType: "requests", openaiCode: "rate_limit_exceeded",
		anthropicType: "rate_limit_error", message: message, retryAfter: retryAfter}
}

func unavailable(message string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, openaiType: "api_error", anthropicType: "api_error", message: message,
		retryAfter: time.Second}
}

func badGateway(message string) *apiError {
	return &apiError{status: http.StatusBadGateway, openaiType: "api_error", anthropicType: "api_error", message: message}
}

// write sends e in the shape of the provider (anthropic, else OpenAI's).
func (e *apiError) write(w http.ResponseWriter, anthropic bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.retryAfter.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(e.retryAfter.Milliseconds()+1, 10))
	}
	if e.noRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body(anthropic))
}

func (e *apiError) body(anthropic bool) []byte {
	var v any
	if anthropic {
		type inner struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		v = struct {
			Type  string `json:"type"`
			Error inner  `json:"error"`
		}{"error", inner{e.anthropicType, e.message}}
	} else {
		type inner struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		}
		in := inner{Message: e.message, Type: e.openaiType}
		if e.openaiCode != "" {
			in.Code = &e.openaiCode
		}
		v = struct {
			Error inner `json:"error"`
		}{in}
	}
	b, _ := json.Marshal(v)
	return append(b, '\n')
}
