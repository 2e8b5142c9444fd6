package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/internal/testutil/tlstest"
)

// StartTLS gives a TLS-only server: a client trusting the test CA gets in
// through the rediss:// URL; one trusting another CA, or speaking plain
// TCP, does not.
func TestStartTLS(t *testing.T) {
	pki := tlstest.New(t)
	s := redistest.StartTLS(t, redistest.TLSFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CAFile},
		redistest.WithArgs("--requirepass", "pw"))
	if !strings.HasPrefix(s.TLSURL(), "rediss://:pw@127.0.0.1:") {
		t.Fatalf("TLSURL %q", s.TLSURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ping := func(o *redis.Options) error {
		o.MaxRetries = -1
		c := redis.NewClient(o)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	o, err := redis.ParseURL(s.TLSURL())
	if err != nil {
		t.Fatal(err)
	}
	o.TLSConfig = pki.ClientConfig(t, false)
	if err := ping(o); err != nil {
		t.Fatalf("TLS with the right CA: %v", err)
	}
	other := pki.ClientConfig(t, false)
	other.RootCAs = nil // the system's roots: not the test CA
	o.TLSConfig = other
	if err := ping(o); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS with the system roots: %v, want a certificate error", err)
	}
	if err := ping(&redis.Options{Addr: s.Addr(), Password: "pw"}); err == nil {
		t.Fatal("plain TCP to the TLS port worked")
	}
}
