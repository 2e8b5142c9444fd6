package ops

import (
	"context"
	"errors"
	"strings"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The changes of a key (a credential of the pool) for the running fleet:
// each applies to every worker at its next decision, and outlives worker
// restarts while the key's definition in the configuration stays as it
// is. Their errors: ErrNotFound (the key is not in the pool; the error
// lists those it has), ErrInvalid (a value the pool refuses),
// ErrUnavailable (Redis).

// EnableKey puts key id back into use: it clears its disabled state, any
// rest, any learnt pace and any streak of refusals.
func EnableKey(ctx context.Context, pool *creds.Pool, id string) error {
	return keyErr(ctx, pool, id, pool.Enable(ctx, id))
}

// DisableKey takes key id out of use until EnableKey, for reason, as an
// operator's decision (no probe enables it again); jobs holding it run to
// their end.
func DisableKey(ctx context.Context, pool *creds.Pool, id, reason string) error {
	return keyErr(ctx, pool, id, pool.Disable(ctx, id, reason))
}

// RemoveKey deletes key id and its state from the pool; leases held on it
// fail at their next renewal. A worker whose configuration lists the key
// adds it back when it starts.
func RemoveKey(ctx context.Context, pool *creds.Pool, id string) error {
	return keyErr(ctx, pool, id, pool.Remove(ctx, id))
}

// SetKeyLimits changes key id's concurrency and limits (fields of l left
// nil stay as they are; none set is ErrInvalid).
func SetKeyLimits(ctx context.Context, pool *creds.Pool, id string, l creds.Limits) error {
	if l.MaxConcurrent == nil && l.Rate == nil && l.Limits == nil {
		return Errorf(ErrInvalid, "credential %s: nothing to change", id)
	}
	return keyErr(ctx, pool, id, pool.SetLimits(ctx, id, l))
}

// CheckKey is nil when the pool has key id, else why (ErrNotFound,
// ErrUnavailable): a front end that asks before a change calls it first.
func CheckKey(ctx context.Context, pool *creds.Pool, id string) error {
	st, err := pool.Stats(ctx)
	if err != nil {
		return unavailable(err, "Redis")
	}
	for _, c := range st.Credentials {
		if c.ID == id {
			return nil
		}
	}
	return keyErr(ctx, pool, id, creds.ErrNoSuchCredential)
}

// keyErr classes an error of the pool about key id.
func keyErr(ctx context.Context, pool *creds.Pool, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, creds.ErrNoSuchCredential):
		known := "none"
		if st, serr := pool.Stats(ctx); serr == nil && len(st.Credentials) > 0 {
			ids := make([]string, len(st.Credentials))
			for i, c := range st.Credentials {
				ids[i] = c.ID
			}
			known = strings.Join(ids, ", ")
		}
		return Errorf(ErrNotFound, "no credential %q in pool %q (it has: %s)", id, pool.Name(), known)
	case errors.Is(err, creds.ErrInvalid):
		return &Error{Class: ErrInvalid, Err: err}
	}
	return unavailable(err, "Redis")
}
