package connect_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/connect"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// redis.cluster with the seed nodes listed in the URL's host part, as
// config documents, reaches every node of a real cluster. (Before the fix,
// net/url parsed "h1:7000,h2:7001" as one host with port 7001 and the
// client dialled "[h1:7000,h2]:7001".)
func TestRedisClusterSeedList(t *testing.T) {
	cl := redistest.StartCluster(t)
	a := cl.Addrs()
	for _, url := range []string{
		"redis://" + strings.Join(a, ","),
		"redis://" + strings.Join(a, ",") + "/0",
		"redis://" + strings.Join(a, ",") + "?dial_timeout=2s",
		"redis://" + a[0] + "," + a[1],
		"redis://" + a[2],
		"redis://" + a[0] + "?addr=" + a[1],
		// A dead first seed: the others must be tried.
		"redis://" + testutil.FreeAddr(t) + "," + a[1] + "," + a[2],
	} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb, err := connect.Redis(ctx, config.Redis{URL: url, Cluster: true}, 4, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			// Keys spread over every slot range, hence every node.
			for i := range 30 {
				k := fmt.Sprintf("seed-%d", i)
				if err := rdb.Set(ctx, k, i, time.Minute).Err(); err != nil {
					t.Fatalf("set %s: %v", k, err)
				}
			}
		})
	}
}

// Redact hides every password and token, whatever the URL holds; a user
// name and the servers stay.
func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://u:pw@h:4222", "nats://u:REDACTED@h:4222"},
		{"nats://tok@h:4222", "nats://REDACTED@h:4222"},
		{"tls://u:pw@h1:4222,tls://u:pw@h2:4222", "tls://u:REDACTED@h1:4222,tls://u:REDACTED@h2:4222"},
		{"nats://u:pw@h1:4222,nats://h2:4222", "nats://u:REDACTED@h1:4222,nats://h2:4222"},
		{"redis://:pw@h:6379/0", "redis://:REDACTED@h:6379/0"},
		{"rediss://user:pw@h:6379/0", "rediss://user:REDACTED@h:6379/0"},
		{"redis://:pw@h1:7000,h2:7001/0", "redis://:REDACTED@h1:7000,h2:7001/0"},
		// A password net/url cannot read, or holding ',' or '@'.
		{"redis://:s3cr,etPw@127.0.0.1:1/0", "redis://:REDACTED@127.0.0.1:1/0"},
		{"redis://kf:s3cr,etPw@h1:1,h2:2/0", "redis://kf:REDACTED@h1:1,h2:2/0"},
		{"redis://:pa%zz@h:6379/0", "redis://:REDACTED@h:6379/0"},
		{"redis://:p@ss@h:6379/0", "redis://:REDACTED@h:6379/0"},
		{"nats://to ken@h:4222", "nats://REDACTED@h:4222"},
		// An '@' after the host is no user information.
		{"redis://h:6379/0?client_name=a@b", "redis://h:6379/0?client_name=a@b"},
		{"unix:///run/redis.sock", "unix:///run/redis.sock"},
		{"", ""},
	} {
		if got := connect.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A failed connection names the server without its password, also when
// the password holds a comma (which a split of the URL list at ',' would
// cut in two and show).
func TestRedisErrorHidesPassword(t *testing.T) {
	url := "redis://kf:s3cr,etPw@" + testutil.FreeAddr(t) + "/0"
	_, err := connect.Redis(context.Background(), config.Redis{URL: url}, 1, 2*time.Second)
	if err == nil {
		t.Fatal("no error from a dead server")
	}
	if strings.Contains(err.Error(), "s3cr") || strings.Contains(err.Error(), "etPw") {
		t.Fatalf("the error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "Redis at redis://kf:REDACTED@") {
		t.Fatalf("the error does not name the server: %v", err)
	}
}
