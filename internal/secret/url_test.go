package secret_test

import (
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/secret"
)

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://kf:s3cr,etPw@127.0.0.1:1", "nats://kf:REDACTED@127.0.0.1:1"},
		{"nats://tok3n@h:4222,nats://u:p@h2:4222", "nats://REDACTED@h:4222,nats://u:REDACTED@h2:4222"},
		{"redis://:pw@h1:7000,h2:7001/0", "redis://:REDACTED@h1:7000,h2:7001/0"},
		{"rediss://user:p@ss@host:6380/0", "rediss://user:REDACTED@host:6380/0"},
		{":sk-live-9f8e7d6c5b4a@h:6379", "REDACTED@h:6379"},
		{"plain text", "plain text"},
	}
	for _, c := range cases {
		got := secret.RedactURL(c.in)
		if got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, pw := range []string{"s3cr", "etPw", "tok3n", "sk-live", "p@ss"} {
			if strings.Contains(c.in, pw) && strings.Contains(got, pw) {
				t.Errorf("RedactURL(%q) keeps %q", c.in, pw)
			}
		}
	}
}

func TestRedactURLPasswordWithSlash(t *testing.T) {
	got := secret.RedactURL("redis://:a/sk-live-9f8e7d6c5b4a@b@h:99999/0")
	if strings.Contains(got, "sk-live") || got != "redis://:REDACTED@h:99999/0" {
		t.Fatalf("got %q", got)
	}
}
