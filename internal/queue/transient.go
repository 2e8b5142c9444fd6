package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes that say "not ready yet" (nats-server's
// errors.json): the cluster is forming, electing a leader, or has not heard
// from enough of its peers.
const (
	errCodeClusterIncomplete   = 10004 // incomplete results
	errCodeClusterNoPeers      = 10005 // no suitable peers for placement
	errCodeClusterNotAssigned  = 10007 // JetStream cluster not assigned to this server
	errCodeClusterNotAvailable = 10008 // JetStream system temporarily unavailable (no meta leader)
	errCodeClusterNotLeader    = 10009 // JetStream cluster can not handle request
	errCodePeerRemap           = 10075 // peer remap failed
	errCodeNotEnabled          = 10076 // JetStream not enabled (yet: it is still starting)
	errCodeMemberChange        = 10202 // cluster member change is in progress
)

// Transient reports whether err, returned by a JetStream API request (or
// by Open, Attach or Consumer, which wrap them), says that JetStream is not
// ready yet rather than that the request is wrong: a cluster still forming
// or electing leaders, a server still starting JetStream, a request that
// found nobody to answer it in time. Such a request may succeed if tried
// again a little later. Everything else is not transient: bad credentials,
// permission denied, an invalid stream configuration, a closed connection,
// a cancelled context.
//
// A server without JetStream at all answers like one still starting it
// (no responders, "JetStream not enabled"), and a placement that can never
// succeed (3 replicas on 2 servers) like one still waiting for its peers:
// a caller retries these for a bound, then reports the last error.
func Transient(err error) bool {
	if err == nil || errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeClusterIncomplete, errCodeClusterNoPeers, errCodeClusterNotAssigned,
			errCodeClusterNotAvailable, errCodeClusterNotLeader, errCodePeerRemap,
			errCodeNotEnabled, errCodeMemberChange:
			return true
		}
		return false
	}
	return errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrJetStreamNotEnabled)
}

// refused adds to err, the error of a JetStream API request that got no
// answer, the reason when the server refused to pass the request on: a
// permissions violation is reported on the connection, not to the
// request, which only times out. With it err is not Transient.
func refused(nc *nats.Conn, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), "$JS.") {
		return fmt.Errorf("%w: %w", err, last)
	}
	return err
}
