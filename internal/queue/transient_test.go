package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// apiErr is an error as the JetStream client returns it for a server's
// error reply (nats-server's errors.json gives code, err_code and text).
func apiErr(code int, errCode jetstream.ErrorCode, desc string) error {
	return &jetstream.APIError{Code: code, ErrorCode: errCode, Description: desc}
}

func TestTransient(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("queue: stream KEYFLEET (subjects [k.*]): %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		// Not ready yet: a cluster forming or electing, JetStream starting.
		{"no suitable peers (10005)", apiErr(400, 10005, "no suitable peers for placement, peer offline"), true},
		{"no suitable peers, wrapped", wrap(apiErr(400, 10005, "no suitable peers for placement")), true},
		{"no meta leader (10008)", apiErr(503, 10008, "JetStream system temporarily unavailable"), true},
		{"cluster not leader (10009)", apiErr(500, 10009, "JetStream cluster can not handle request"), true},
		{"cluster not assigned (10007)", apiErr(500, 10007, "JetStream cluster not assigned to this server"), true},
		{"incomplete results (10004)", apiErr(503, 10004, "incomplete results"), true},
		{"member change in progress (10202)", apiErr(400, 10202, "cluster member change is in progress"), true},
		{"jetstream.ErrJetStreamNotEnabled", jetstream.ErrJetStreamNotEnabled, true},
		{"jetstream.ErrJetStreamNotEnabled, wrapped", wrap(jetstream.ErrJetStreamNotEnabled), true},
		{"nats.ErrJetStreamNotEnabled", nats.ErrJetStreamNotEnabled, true},
		{"nats.ErrTimeout", nats.ErrTimeout, true},
		{"nats.ErrNoResponders", wrap(nats.ErrNoResponders), true},
		{"context deadline", wrap(context.DeadlineExceeded), true},
		// Wrong requests, refusals, and the caller giving up.
		{"not enabled for account (10039)", jetstream.ErrJetStreamNotEnabledForAccount, false},
		{"replicas > 1 on a lone server (10074)", apiErr(500, 10074, "replicas > 1 not supported in non-clustered mode"), false},
		{"subjects overlap (10065)", wrap(apiErr(400, 10065, "subjects overlap with an existing stream")), false},
		{"stream config invalid (10052)", apiErr(500, 10052, "stream configuration invalid"), false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"permissions violation", fmt.Errorf("%w: %w", context.DeadlineExceeded,
			fmt.Errorf("%w: Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.KEYFLEET\"", nats.ErrPermissionViolation)), false},
		{"authorization violation", nats.ErrAuthorization, false},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"context canceled", wrap(context.Canceled), false},
		{"other", errors.New("disk full"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := queue.Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The errors of a real server that refuses a request are not transient:
// Open reports them at once, whatever the start-up bound.
func TestOpenFailsAtOnceOnRealRefusals(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s.URL())
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"keyfleet.items.>"}}); err != nil {
		t.Fatal(err)
	}
	startup := queue.Startup{Timeout: time.Minute, Waiting: func(err error, _ time.Duration) {
		t.Errorf("retried after %v", err)
	}}
	for _, tc := range []struct {
		name string
		cfg  queue.Config
		code jetstream.ErrorCode
	}{
		{"subjects overlap", queue.Config{}, 10065},
		{"3 replicas on a lone server", queue.Config{Stream: "R3", SubjectPrefix: "r3", Replicas: 3}, 10074},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := startup.Open(ctx(t), nc, tc.cfg)
			var ae *jetstream.APIError
			if !errors.As(err, &ae) || ae.ErrorCode != tc.code {
				t.Fatalf("want err_code %d, got %v", tc.code, err)
			}
			if queue.Transient(err) {
				t.Errorf("Transient(%v) = true", err)
			}
			t.Logf("%s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}
