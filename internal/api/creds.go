package api

import (
	"net/http"
	"strings"

	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// credentialRequest is the body of POST /api/creds/enable and disable.
type credentialRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func credentialRequestOf(r *http.Request) (credentialRequest, error) {
	var req credentialRequest
	if err := decode(r, &req); err != nil {
		return req, err
	}
	if req.ID == "" {
		return req, invalidf(`bad request body: "id" is required`)
	}
	return req, nil
}

// enableCredential: POST /api/creds/enable {"id"} (ops.EnableCredential).
func (a *API) enableCredential(r *http.Request) (any, error) {
	req, err := credentialRequestOf(r)
	if err != nil {
		return nil, err
	}
	if err := ops.EnableCredential(r.Context(), a.pool, req.ID); err != nil {
		return nil, err
	}
	return map[string]string{"id": req.ID, "state": "enabled"}, nil
}

// disableCredential: POST /api/creds/disable {"id", "reason"}
// (ops.DisableCredential); the reason defaults to "disabled from the dashboard".
func (a *API) disableCredential(r *http.Request) (any, error) {
	req, err := credentialRequestOf(r)
	if err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = "disabled from the dashboard"
	}
	if err := ops.DisableCredential(r.Context(), a.pool, req.ID, reason); err != nil {
		return nil, err
	}
	return map[string]string{"id": req.ID, "state": creds.StateDisabled, "reason": reason}, nil
}
