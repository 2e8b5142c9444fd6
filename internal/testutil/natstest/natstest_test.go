package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

func TestRestartKeepsStream(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	for {
		info, err := js.Stream(ctx, "T")
		if err == nil {
			if n := info.CachedInfo().State.Msgs; n != 1 {
				t.Fatalf("msgs after restart = %d, want 1", n)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream not back after restart: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
