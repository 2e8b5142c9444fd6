package connect_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/connect"
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
		"redis://" + deadAddr(t) + "," + a[1] + "," + a[2],
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

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
