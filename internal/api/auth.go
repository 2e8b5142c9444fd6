package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"go.uber.org/zap"
)

// maxActionBody bounds a JSON write's body.
const maxActionBody = 64 << 10

// ReadOnly reports whether the API has no admin token: every write, and
// the results, are refused.
func (a *API) ReadOnly() bool { return a.token == "" }

// Authorized reports whether r carries the admin token as a bearer token
// (never on a read-only API); the token is compared in constant time, over
// its hash, so that neither length leaks. Whoever has it may also read
// what jobs and APIs wrote.
func (a *API) Authorized(r *http.Request) bool {
	if a.token == "" {
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	x := sha256.Sum256([]byte(strings.TrimSpace(got)))
	y := sha256.Sum256([]byte(a.token))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// guard refuses, as every write is refused, a request to a read-only API
// (403) or without the admin token (401), saying what it would have
// done. It reports whether the request may go on.
func (a *API) guard(rw http.ResponseWriter, r *http.Request, what string) bool {
	if a.token == "" {
		WriteError(rw, http.StatusForbidden, "this dashboard is read-only: start it with --admin-token-env NAME to allow "+what)
		return false
	}
	if !a.Authorized(r) {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="keyfleet dashboard"`)
		WriteError(rw, http.StatusUnauthorized, what+" needs the admin token: Authorization: Bearer <token>")
		return false
	}
	return true
}

// write serves a JSON write action: refused (403) by a read-only API;
// refused (401) without the admin token; refused (415) unless the body is
// JSON, which a cross-site HTML form cannot send; its body bounded by
// maxActionBody. The action's error is answered with its status (Status);
// its result with 200, and the fleet is told (Batches.Changed).
func (a *API) write(action func(*http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if a.token == "" {
			WriteError(rw, http.StatusForbidden, "this dashboard is read-only: start it with --admin-token-env NAME to allow write actions")
			return
		}
		if !a.Authorized(r) {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="keyfleet dashboard"`)
			WriteError(rw, http.StatusUnauthorized, "a write needs the admin token: Authorization: Bearer <token>")
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			WriteError(rw, http.StatusUnsupportedMediaType, "a write takes a JSON body (Content-Type: application/json)")
			return
		}
		r.Body = http.MaxBytesReader(rw, r.Body, maxActionBody)
		out, err := action(r)
		if err != nil {
			a.fail(rw, r, "write action refused", err)
			return
		}
		a.log.Info("write action", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.Any("result", out))
		a.batches.Changed(nil)
		WriteJSON(rw, http.StatusOK, out)
	})
}

// decode reads a JSON body strictly; its error is invalid (400).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("bad request body: %v", err)
	}
	return nil
}
