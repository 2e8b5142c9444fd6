package executor

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Pool is what the executor asks of the credential pool; *creds.Pool
// satisfies it.
type Pool interface {
	// AcquireWith waits for a lease that fits the request.
	AcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error)
	// TryAcquireWith leases a credential with room now, else fails with
	// creds.ErrNoneAvailable.
	TryAcquireWith(ctx context.Context, r creds.Request) (*creds.Lease, error)
	// Renew extends a lease; creds.ErrLeaseLost when it is gone.
	Renew(ctx context.Context, l *creds.Lease) (time.Time, error)
	// SettleAsync ends a lease with a run's outcome, without waiting;
	// done gets the result.
	SettleAsync(l *creds.Lease, o creds.Outcome, done func(error)) error
	// ReleaseUnused ends a lease whose run never started.
	ReleaseUnused(ctx context.Context, l *creds.Lease) error
	// Rest rests a credential (what a run on a lost lease said of its key).
	Rest(ctx context.Context, id string, d time.Duration, reason, cause string) (time.Time, error)
}
