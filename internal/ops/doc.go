// Package ops holds the operators' actions on the fleet, each written
// once for every front end (the producer CLI, the HTTP API the dashboard
// serves): what an action does, in what order, and its errors. A front end
// parses its input, calls the action, and formats what it did; it maps the
// error's class (Class) to an exit code (internal/exitcode) or an HTTP
// status (internal/api), each in one place.
//
// Layout:
//
//	errors.go       the classes of error (not found, conflict, invalid,
//	                unavailable, interrupted), Error, and Class, which also
//	                classes the errors of enqueue and of the views
//	steer.go        pause, resume and cancel a batch: the checks, the change
//	done.go         the rule of a done batch, which pause and cancel refuse
//	drain.go        a cancel's drain of the items not started, bounded
//	replay.go       dead letters back on the queue (one batch, some items, all)
//	credentials.go  enable, disable, remove a credential, set its limits
//	budget.go       a batch's budget (batch set --budget)
//	tenant.go       a tenant's live budget (tenant set --budget), and the
//	                resume of its batches paused for it
//
// Enqueue is internal/enqueue's, and the views are internal/status,
// internal/batchview and internal/itemview: both front ends call those
// directly, and Class classes their errors as it classes these.
package ops
