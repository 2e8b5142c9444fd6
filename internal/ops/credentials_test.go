package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// newPool is a pool of credentials key-a and key-b on its own redis-server.
func newPool(t *testing.T) (context.Context, *creds.Pool, *redistest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rs := redistest.Start(t)
	pool, err := creds.New(rs.Client(t), redistest.UniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	if err := pool.Register(ctx, []creds.Credential{{ID: "key-a", MaxConcurrent: 1}, {ID: "key-b", MaxConcurrent: 2}}); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, rs
}

func credentialStats(t *testing.T, ctx context.Context, pool *creds.Pool, id string) creds.CredentialStats {
	t.Helper()
	st, err := pool.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		if c.ID == id {
			return c
		}
	}
	return creds.CredentialStats{}
}

// Disable, enable, set limits and remove change the credential for every
// worker; each names an unknown credential with the pool's credentials,
// and refuses a value the pool does not take.
func TestCredentials(t *testing.T) {
	ctx, pool, rs := newPool(t)
	if err := ops.DisableCredential(ctx, pool, "key-b", "billing issue"); err != nil {
		t.Fatal(err)
	}
	if c := credentialStats(t, ctx, pool, "key-b"); c.State != creds.StateDisabled || c.DisabledReason != "billing issue" || c.DisabledBy != creds.DisabledByOperator {
		t.Errorf("key-b after disable: %+v", c)
	}
	if err := ops.EnableCredential(ctx, pool, "key-b"); err != nil {
		t.Fatal(err)
	}
	if c := credentialStats(t, ctx, pool, "key-b"); c.State == creds.StateDisabled {
		t.Errorf("key-b after enable: %+v", c)
	}
	three := 3
	if err := ops.SetCredentialLimits(ctx, pool, "key-a", creds.Limits{MaxConcurrent: &three}); err != nil {
		t.Fatal(err)
	}
	if c := credentialStats(t, ctx, pool, "key-a"); c.MaxConcurrent != 3 {
		t.Errorf("key-a after set: %+v", c)
	}
	if err := ops.CheckCredential(ctx, pool, "key-a"); err != nil {
		t.Errorf("check key-a: %v", err)
	}

	zero := 0
	for _, c := range []struct {
		name  string
		err   error
		class error
		says  string
	}{
		{"enable", ops.EnableCredential(ctx, pool, "key-zz"), ops.ErrNotFound, `no credential "key-zz" in pool "` + pool.Name() + `" (it has: key-a, key-b)`},
		{"disable", ops.DisableCredential(ctx, pool, "key-zz", "x"), ops.ErrNotFound, `no credential "key-zz"`},
		{"remove", ops.RemoveCredential(ctx, pool, "key-zz"), ops.ErrNotFound, `no credential "key-zz"`},
		{"set", ops.SetCredentialLimits(ctx, pool, "key-zz", creds.Limits{MaxConcurrent: &three}), ops.ErrNotFound, `no credential "key-zz"`},
		{"check", ops.CheckCredential(ctx, pool, "key-zz"), ops.ErrNotFound, `no credential "key-zz"`},
		{"set 0", ops.SetCredentialLimits(ctx, pool, "key-a", creds.Limits{MaxConcurrent: &zero}), ops.ErrInvalid, "max_concurrent must be at least 1"},
		{"set nothing", ops.SetCredentialLimits(ctx, pool, "key-a", creds.Limits{}), ops.ErrInvalid, "nothing to change"},
	} {
		if !errors.Is(c.err, c.class) || ops.Class(c.err) != c.class || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: want %v saying %q, got %v", c.name, c.class, c.says, c.err)
		}
	}

	if err := ops.RemoveCredential(ctx, pool, "key-a"); err != nil {
		t.Fatal(err)
	}
	if err := ops.CheckCredential(ctx, pool, "key-a"); !errors.Is(err, ops.ErrNotFound) || !strings.Contains(err.Error(), "(it has: key-b)") {
		t.Errorf("key-a after remove: want not found, got %v", err)
	}

	rs.Stop()
	for name, err := range map[string]error{
		"enable": ops.EnableCredential(ctx, pool, "key-b"), "disable": ops.DisableCredential(ctx, pool, "key-b", "x"),
		"check": ops.CheckCredential(ctx, pool, "key-b"),
	} {
		if !errors.Is(err, ops.ErrUnavailable) || !strings.HasPrefix(err.Error(), "Redis: ") {
			t.Errorf("%s with Redis stopped: want ErrUnavailable, got %v", name, err)
		}
	}
}
