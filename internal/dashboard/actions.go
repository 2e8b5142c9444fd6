package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// maxActionBody bounds a write request's body.
const maxActionBody = 64 << 10

// write guards a write action: refused (403) on a read-only dashboard;
// refused (401) without the admin token as a bearer token, compared in
// constant time; refused (415) unless the body is JSON, which a
// cross-site HTML form cannot send. Cross-origin requests never get here
// (http.CrossOriginProtection in Handler).
func (s *Server) write(action func(*http.Request) (any, int, error)) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if s.token == "" {
			writeError(rw, http.StatusForbidden, "this dashboard is read-only: start it with --admin-token-env NAME to allow write actions")
			return
		}
		if !s.authorized(r.Header.Get("Authorization")) {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="keyfleet dashboard"`)
			writeError(rw, http.StatusUnauthorized, "a write needs the admin token: Authorization: Bearer <token>")
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			writeError(rw, http.StatusUnsupportedMediaType, "a write takes a JSON body (Content-Type: application/json)")
			return
		}
		r.Body = http.MaxBytesReader(rw, r.Body, maxActionBody)
		out, code, err := action(r)
		if err != nil {
			s.log.Info("write action refused", zap.String("path", r.URL.Path), zap.Int("code", code), zap.Error(err))
			writeError(rw, code, s.scrub(err.Error()))
			return
		}
		s.log.Info("write action", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.Any("result", out))
		select {
		case s.poke <- struct{}{}: // show its effect at once
		default:
		}
		writeJSON(rw, http.StatusOK, out)
	})
}

// authorized compares the bearer token with the admin token in constant
// time (over their hashes, so that neither length leaks either).
func (s *Server) authorized(header string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a := sha256.Sum256([]byte(strings.TrimSpace(got)))
	b := sha256.Sum256([]byte(s.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// decode reads a JSON body strictly.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

type credentialRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (s *Server) credentialRequest(r *http.Request) (credentialRequest, int, error) {
	var req credentialRequest
	if err := decode(r, &req); err != nil {
		return req, http.StatusBadRequest, err
	}
	if req.ID == "" {
		return req, http.StatusBadRequest, errors.New(`bad request body: "id" is required`)
	}
	return req, 0, nil
}

// poolError maps a pool error to its status code.
func poolError(err error) int {
	switch {
	case errors.Is(err, creds.ErrNoSuchCredential):
		return http.StatusNotFound
	case errors.Is(err, creds.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

// enableCredential: POST /api/creds/enable {"id"}.
func (s *Server) enableCredential(r *http.Request) (any, int, error) {
	req, code, err := s.credentialRequest(r)
	if err != nil {
		return nil, code, err
	}
	if err := s.pool.Enable(r.Context(), req.ID); err != nil {
		return nil, poolError(err), err
	}
	return map[string]string{"id": req.ID, "state": "enabled"}, 0, nil
}

// disableCredential: POST /api/creds/disable {"id", "reason"}.
func (s *Server) disableCredential(r *http.Request) (any, int, error) {
	req, code, err := s.credentialRequest(r)
	if err != nil {
		return nil, code, err
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "disabled from the dashboard"
	}
	if err := s.pool.Disable(r.Context(), req.ID, reason); err != nil {
		return nil, poolError(err), err
	}
	return map[string]string{"id": req.ID, "state": creds.StateDisabled, "reason": reason}, 0, nil
}

type replayRequest struct {
	Batch string   `json:"batch"` // "" for every batch
	Items []string `json:"items"` // none: every record (of Batch)
}

// replayDeadLetters: POST /api/dlq/replay {"batch", "items"}: puts the
// matching dead letters back on the queue with fresh attempts. An item
// without a record is an error and then nothing is replayed.
func (s *Server) replayDeadLetters(r *http.Request) (any, int, error) {
	var req replayRequest
	if err := decode(r, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	if req.Batch != "" {
		if err := queue.CheckID("batch", req.Batch); err != nil {
			return nil, http.StatusBadRequest, err
		}
	}
	todo, missing, err := s.q.DeadLettersToReplay(r.Context(), req.Batch, req.Items)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("reading the dead letters: %w", err)
	}
	if len(missing) > 0 {
		return nil, http.StatusNotFound, fmt.Errorf("no dead letter for %q: nothing replayed", missing)
	}
	for i, d := range todo {
		if err := s.q.Replay(r.Context(), d); err != nil {
			return nil, http.StatusBadGateway, fmt.Errorf("replayed %d of %d dead letters, then: %w", i, len(todo), err)
		}
	}
	return map[string]int{"replayed": len(todo)}, 0, nil
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(v)
}

func writeError(rw http.ResponseWriter, code int, msg string) {
	writeJSON(rw, code, map[string]string{"error": msg})
}
