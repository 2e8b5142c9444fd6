package dashboard

import (
	"reflect"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

func TestBlockedBy(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	later := at.Add(time.Second)
	for _, c := range []struct {
		name string
		c    status.Credential
		want []string
	}{
		{"available", status.Credential{State: creds.StateAvailable, MaxConcurrent: 1}, nil},
		{"disabled", status.Credential{State: creds.StateDisabled}, []string{"disabled"}},
		{"resting", status.Credential{State: creds.StateCooling, CoolingUntil: &later}, []string{"rest"}},
		{"full", status.Credential{State: creds.StateBusy, InFlight: 2, MaxConcurrent: 2, NextStart: &later}, []string{"max_concurrent"}},
		{"two limits", status.Credential{State: creds.StateBusy, MaxConcurrent: 2, NextStart: &later, Limits: []status.Limit{
			{Limit: "rate=10/s,burst=1", NextRoom: &later}, {Limit: "cost=6000/10s", NextRoom: &later}, {Limit: "rate=500/m"},
		}}, []string{"rate=10/s,burst=1", "cost=6000/10s"}},
		{"pace", status.Credential{State: creds.StateBusy, MaxConcurrent: 2, NextStart: &later, PaceMS: 50}, []string{"pace"}},
	} {
		if got := blockedBy(c.c, at); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
