package cli

import (
	"slices"
	"testing"
)

// The passwords and bare tokens of server URLs are what the dashboard
// scrubs from the errors it shows.
func TestURLSecrets(t *testing.T) {
	for _, c := range []struct {
		url  string
		want []string
	}{
		{"nats://127.0.0.1:4222", nil},
		{"redis://:pw-1@redis:6379/0", []string{"pw-1"}},
		{"redis://app:pw-2@redis:6379/0", []string{"pw-2"}},
		{"nats://s3cr3t-token@nats:4222", []string{"s3cr3t-token"}},
		{"nats://u:p1@a:4222, nats://u:p2@b:4222", []string{"p1", "p2"}},
	} {
		if got := urlSecrets(c.url); !slices.Equal(got, c.want) {
			t.Errorf("%s: want %q, got %q", c.url, c.want, got)
		}
	}
}
