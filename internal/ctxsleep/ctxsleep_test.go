package ctxsleep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
)

func TestSleepWaits(t *testing.T) {
	start := time.Now()
	if err := ctxsleep.Sleep(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	if got := time.Since(start); got < 20*time.Millisecond {
		t.Fatalf("Sleep returned after %s, want at least 20ms", got)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	start := time.Now()
	if err := ctxsleep.Sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Fatalf("Sleep = %v, want the context's cause %v", err, cause)
	}
	if got := time.Since(start); got > 10*time.Second {
		t.Fatalf("Sleep returned after %s on an ended context", got)
	}
}

func TestSleepNothing(t *testing.T) {
	if err := ctxsleep.Sleep(t.Context(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v, want nil", err)
	}
	why := errors.New("stopped")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(why)
	if err := ctxsleep.Sleep(ctx, -time.Second); !errors.Is(err, why) {
		t.Fatalf("Sleep(-1s) after the context ended = %v, want its cause", err)
	}
}
