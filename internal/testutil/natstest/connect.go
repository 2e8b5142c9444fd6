package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// Connect connects a client to url (a Server's URL or a Cluster's URLs),
// fails the test if it cannot, and closes the connection at the end of the
// test.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
