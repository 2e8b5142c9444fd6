package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// jobs.batch_api: the defaults (poll 1m, margin 1h), one key given keeps
// the other's default, and a value that is not positive is refused,
// naming the key.
func TestBatchAPISettings(t *testing.T) {
	c, err := config.Load(writeFile(t, "k.yaml", "jobs:\n  max_output: 1KiB\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Jobs.BatchAPI.Poll != time.Minute || c.Jobs.BatchAPI.Margin != time.Hour {
		t.Errorf("defaults: %+v, want poll 1m, margin 1h", c.Jobs.BatchAPI)
	}
	c, err = config.Load(writeFile(t, "k.yaml", "jobs:\n  batch_api: {poll: 5s}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Jobs.BatchAPI.Poll != 5*time.Second || c.Jobs.BatchAPI.Margin != time.Hour {
		t.Errorf("poll given: %+v, want poll 5s, margin 1h", c.Jobs.BatchAPI)
	}
	for _, bad := range []string{"poll: 0s", "margin: -1m"} {
		_, err := config.Load(writeFile(t, "k.yaml", "jobs:\n  batch_api: {"+bad+"}\n"), env(nil))
		key := "jobs.batch_api." + strings.SplitN(bad, ":", 2)[0]
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, key)
		}
	}
	if _, err := config.Load(writeFile(t, "k.yaml", "jobs:\n  batch_api: {pol: 5s}\n"), env(nil)); err == nil ||
		!strings.Contains(err.Error(), "pol") {
		t.Errorf("an unknown key: %v", err)
	}
}
