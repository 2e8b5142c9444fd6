package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/ops"
)

// Status is the HTTP status of an error of an action, an enqueue or a
// view: the one place the API maps errors. By its class (ops.Class): an
// invalid request 400, what it names not there 404, a change that does
// not apply (a cancelled batch included) 409, a server that failed, or an
// enqueue interrupted, 503; a body over its bound (an
// *http.MaxBytesError) 413; an error of no class 500.
func Status(err error) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	switch ops.Class(err) {
	case ops.ErrInvalid:
		return http.StatusBadRequest
	case ops.ErrNotFound:
		return http.StatusNotFound
	case ops.ErrConflict:
		return http.StatusConflict
	case ops.ErrUnavailable, ops.ErrInterrupted:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// fail answers err with its status and its text (scrubbed), logged as
// what.
func (a *API) fail(rw http.ResponseWriter, r *http.Request, what string, err error) {
	code := Status(err)
	a.log.Info(what, zap.String("path", r.URL.Path), zap.Int("code", code), zap.String("remote", r.RemoteAddr), zap.Error(err))
	WriteError(rw, code, a.scrub(err.Error()))
}

// invalidf is an invalid request's error (ops.ErrInvalid: 400).
func invalidf(format string, args ...any) error {
	return opsInvalid(fmt.Errorf(format, args...))
}

// opsInvalid is err as an invalid request (ops.ErrInvalid).
func opsInvalid(err error) error { return &ops.Error{Class: ops.ErrInvalid, Err: err} }

// unavailable is err, a server's, as ops.ErrUnavailable.
func unavailable(err error) error { return &ops.Error{Class: ops.ErrUnavailable, Err: err} }

// WriteJSON answers v as JSON with code.
func WriteJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(v)
}

// WriteError answers {"error": msg} with code.
func WriteError(rw http.ResponseWriter, code int, msg string) {
	WriteJSON(rw, code, map[string]string{"error": msg})
}
