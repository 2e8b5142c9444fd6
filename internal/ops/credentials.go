package ops

import (
	"context"
	"errors"
	"strings"

	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The changes of a credential of the pool for the running fleet: each
// applies to every worker at its next decision, and outlives worker
// restarts while the credential's definition in the configuration stays
// as it is. Their errors: ErrNotFound (the credential is not in the pool;
// the error lists those it has), ErrInvalid (a value the pool refuses),
// ErrUnavailable (Redis).

// EnableCredential puts credential id back into use: it clears its disabled state, any
// rest, any learnt pace and any streak of refusals.
func EnableCredential(ctx context.Context, pool *creds.Pool, id string) error {
	return credentialErr(ctx, pool, id, pool.Enable(ctx, id))
}

// DisableCredential takes credential id out of use until EnableCredential, for reason, as an
// operator's decision (no probe enables it again); jobs holding it run to
// their end.
func DisableCredential(ctx context.Context, pool *creds.Pool, id, reason string) error {
	return credentialErr(ctx, pool, id, pool.Disable(ctx, id, reason))
}

// RemoveCredential deletes credential id and its state from the pool; leases held on it
// fail at their next renewal. A worker whose configuration lists the
// credential adds it back when it starts.
func RemoveCredential(ctx context.Context, pool *creds.Pool, id string) error {
	return credentialErr(ctx, pool, id, pool.Remove(ctx, id))
}

// SetCredentialLimits changes credential id's concurrency and limits (fields of l left
// nil stay as they are; none set is ErrInvalid). An id that names an
// account of the pool changes the account's limits (IsAccount): an
// account has no concurrency of its own (its keys do), so
// l.MaxConcurrent is ErrInvalid for it.
func SetCredentialLimits(ctx context.Context, pool *creds.Pool, id string, l creds.Limits) error {
	if l.MaxConcurrent == nil && l.Rate == nil && l.Limits == nil {
		return Errorf(ErrInvalid, "credential %s: nothing to change", id)
	}
	err := pool.SetLimits(ctx, id, l)
	if !errors.Is(err, creds.ErrNoSuchCredential) {
		return credentialErr(ctx, pool, id, err)
	}
	if acct, aerr := IsAccount(ctx, pool, id); aerr != nil || !acct {
		return credentialErr(ctx, pool, id, err)
	}
	if l.MaxConcurrent != nil {
		return Errorf(ErrInvalid, "account %s: an account has no max_concurrent (its keys do): give --limit", id)
	}
	var set []creds.Limit
	if l.Rate != nil && *l.Rate != "" {
		r, perr := creds.ParseLimit("rate=" + *l.Rate)
		if perr != nil {
			return &Error{Class: ErrInvalid, Err: perr}
		}
		set = append(set, r)
	}
	if l.Limits != nil {
		set = append(set, *l.Limits...)
	}
	return credentialErr(ctx, pool, id, pool.SetAccountLimits(ctx, id, set))
}

// IsAccount reports whether id names an account of the pool (rather than
// a credential).
func IsAccount(ctx context.Context, pool *creds.Pool, id string) (bool, error) {
	st, err := pool.Stats(ctx)
	if err != nil {
		return false, unavailable(err, "Redis")
	}
	for _, a := range st.Accounts {
		if a.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// CheckCredential is nil when the pool has credential id, else why (ErrNotFound,
// ErrUnavailable): a front end that asks before a change calls it first.
func CheckCredential(ctx context.Context, pool *creds.Pool, id string) error {
	st, err := pool.Stats(ctx)
	if err != nil {
		return unavailable(err, "Redis")
	}
	for _, c := range st.Credentials {
		if c.ID == id {
			return nil
		}
	}
	return credentialErr(ctx, pool, id, creds.ErrNoSuchCredential)
}

// credentialErr classes an error of the pool about credential id.
func credentialErr(ctx context.Context, pool *creds.Pool, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, creds.ErrNoSuchCredential), errors.Is(err, creds.ErrNoSuchAccount):
		known := "none"
		if st, serr := pool.Stats(ctx); serr == nil && len(st.Credentials)+len(st.Accounts) > 0 {
			ids := make([]string, 0, len(st.Credentials)+len(st.Accounts))
			for _, c := range st.Credentials {
				ids = append(ids, c.ID)
			}
			for _, a := range st.Accounts {
				ids = append(ids, "account "+a.ID)
			}
			known = strings.Join(ids, ", ")
		}
		return Errorf(ErrNotFound, "no credential %q in pool %q (it has: %s)", id, pool.Name(), known)
	case errors.Is(err, creds.ErrInvalid):
		return &Error{Class: ErrInvalid, Err: err}
	}
	return unavailable(err, "Redis")
}
