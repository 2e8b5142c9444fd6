package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/status"
)

// A tenant's budget is changed for the running fleet with
// ops.SetTenantBudget, as `producer tenant set NAME --budget` does
// (docs/operations.md, "Spend, budgets and tenants"):
//
//	GET  /api/tenants                the tenants (`tenant list --json`)
//	POST /api/tenants/{name}/budget  {"budget": "AMOUNT/PERIOD"} or
//	                                 {"budget": "none"} (drop the live budget)
//
// The write needs the admin token and a JSON body, as every write does
// (write); it is recorded as by dashboard@<client address>. It answers
// 200 with the tenant after the change and "resumed", its batches that
// were paused for its budget and run again; 400 for a bad budget, 404
// for a tenant the configuration does not name, 409 for one without a
// configured budget.

// tenantBudgetRequest is the body of POST /api/tenants/{name}/budget.
type tenantBudgetRequest struct {
	Budget *string `json:"budget"`
}

// serveTenants: GET /api/tenants, each tenant's budget in force and its
// spend of the current period ([] without tenants).
func (a *API) serveTenants(rw http.ResponseWriter, r *http.Request) {
	ts := []status.Tenant{}
	if len(a.tenants) > 0 && a.enq.Ledger != nil {
		var err error
		if ts, err = status.Tenants(r.Context(), a.enq.Ledger, a.tenants, time.Now()); err != nil {
			a.fail(rw, r, "reading the tenants failed", unavailable(err))
			return
		}
	}
	WriteJSON(rw, http.StatusOK, ts)
}

// setTenantBudget: POST /api/tenants/{name}/budget.
func (a *API) setTenantBudget(r *http.Request) (any, error) {
	var req tenantBudgetRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Budget == nil {
		return nil, invalidf(`bad request body: "budget" is required (AMOUNT/PERIOD, or "%s" to drop the live budget)`, ops.NoTenantBudget)
	}
	b, err := ops.ParseTenantBudget(*req.Budget)
	if err != nil {
		return nil, invalidf("budget %v", err)
	}
	name := r.PathValue("name")
	if _, err := ops.CheckTenantBudget(a.tenants, name); err != nil {
		return nil, err
	}
	if a.enq.Ledger == nil {
		return nil, unavailable(errors.New("this server has no spend ledger"))
	}
	return ops.SetTenantBudget(r.Context(), a.q, a.enq.Ledger, a.tenants, name, b, "dashboard@"+remoteHost(r.RemoteAddr))
}
