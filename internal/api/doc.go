// Package api serves the fleet's HTTP API for programs
// (docs/http-api.md), which `producer dashboard` mounts beside its page:
//
//	POST /api/batches?kind=K&batch=ID&priority=N&weight=W&id_field=F&format=F&deadline=D&budget=B&tenant=T
//	     body: JSON Lines (Content-Type: application/x-ndjson), admin token
//	     → 200 {"batch", "items", "new", "duplicates", "kind", "priority", "weight"}
//	GET  /api/batches/{id}                  → the batch object (`batch show --json`)
//	GET  /api/batches/{id}/results?format=F → its results as JSON Lines, admin token
//	GET  /api/batches/{id}/items/{item}     → where one item is (`item show --json`)
//	POST /api/batches/{id}/pause|resume|cancel   admin token, no body or {}
//	POST /api/creds/enable {"id"}, /api/creds/disable {"id", "reason"}
//	POST /api/dlq/replay {"batch", "items"}
//	GET  /api/tenants                       → the tenants (`tenant list --json`)
//	POST /api/tenants/{name}/budget {"budget": "AMOUNT/PERIOD"|"none"}, admin token
//	     → 200 the tenant after the change, with "resumed"
//
// Each action is internal/ops's (enqueue internal/enqueue's), as the CLI
// runs it; an error's status comes from its class in one place (Status):
// invalid 400, not found 404, conflict 409, a server's 503. Writes need
// the admin token as a bearer token (401 without it, 403 on a read-only
// server); the server that mounts the API refuses cross-origin requests
// and, on loopback, foreign Host names.
//
// Layout:
//
//	api.go      Options, New, the routes, Batches (where batch objects come from)
//	auth.go     the admin token: guard, and write for the JSON actions
//	errors.go   Status, the one map of errors to statuses, and the replies
//	enqueue.go  POST /api/batches
//	batches.go  GET a batch and its results
//	items.go    GET an item
//	steer.go    pause, resume, cancel
//	creds.go    enable, disable a key
//	dlq.go      replay dead letters
//	tenants.go  the tenants, and a tenant's live budget
package api
