package e2etest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// Helpers of the secrets scenario: everything a run leaves behind (logs,
// NATS messages, Redis keys and values, metrics, command output) is read
// into named text sources and searched for each secret.

// PartialLen is the length of a secret's head or tail that counts as a
// fragment of it (what a truncation in the middle of a secret leaves).
const PartialLen = 10

// LeakScan counts secrets in named sources of text.
type LeakScan struct {
	secrets map[string]string // credential ID -> secret

	mu      sync.Mutex
	sources []scanned
}

type scanned struct {
	name    string
	bytes   int
	hits    int // whole secrets
	partial int // heads or tails of partialLen bytes, outside whole secrets
	where   []string
}

func NewLeakScan(secrets map[string]string) *LeakScan {
	return &LeakScan{secrets: secrets}
}

// Count returns the whole-secret and fragment hits in text, with a short
// excerpt around each (the secret itself shown by credential ID only).
func (l *LeakScan) Count(text string) (hits, partial int, where []string) {
	ids := make([]string, 0, len(l.secrets))
	for id := range l.secrets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := l.secrets[id]
		full := strings.Count(text, s)
		hits += full
		head := strings.Count(text, s[:PartialLen]) - full
		tailN := strings.Count(text, s[len(s)-PartialLen:]) - full
		partial += head + tailN
		for _, frag := range []struct{ what, s string }{{"secret", s}, {"head", s[:PartialLen]}, {"tail", s[len(s)-PartialLen:]}} {
			if frag.what != "secret" && strings.Count(text, frag.s) <= full {
				continue
			}
			if i := strings.Index(text, frag.s); i >= 0 && len(where) < 5 {
				lo, hi := max(0, i-60), min(len(text), i+len(frag.s)+60)
				ex := strings.ReplaceAll(text[lo:hi], s, "<SECRET OF "+id+">")
				where = append(where, fmt.Sprintf("%s of %s: …%q…", frag.what, id, ex))
			}
		}
	}
	return hits, partial, where
}

// Add scans one source and records it.
func (l *LeakScan) Add(name, text string) scanned {
	hits, partial, where := l.Count(text)
	s := scanned{name: name, bytes: len(text), hits: hits, partial: partial, where: where}
	l.mu.Lock()
	l.sources = append(l.sources, s)
	l.mu.Unlock()
	return s
}

func (l *LeakScan) Totals() (sources, bytes, hits, partial int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sources {
		bytes += s.bytes
		hits += s.hits
		partial += s.partial
	}
	return len(l.sources), bytes, hits, partial
}

// Report lists every source, with the excerpts of those that hold a
// secret or a fragment.
func (l *LeakScan) Report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.sources {
		fmt.Fprintf(&b, "  %-40s %8d bytes  %d secrets  %d fragments\n", s.name, s.bytes, s.hits, s.partial)
		for _, w := range s.where {
			fmt.Fprintf(&b, "      %s\n", w)
		}
	}
	return b.String()
}

// DumpStreams writes every message of every stream on the server, with
// its subject and headers, and each stream's configuration.
func DumpStreams(ctx context.Context, js jetstream.JetStream) (string, int, error) {
	var b strings.Builder
	msgs := 0
	lister := js.ListStreams(ctx)
	var infos []*jetstream.StreamInfo
	for info := range lister.Info() {
		infos = append(infos, info)
	}
	if err := lister.Err(); err != nil {
		return "", 0, fmt.Errorf("list streams: %w", err)
	}
	for _, info := range infos {
		fmt.Fprintf(&b, "== stream %s %+v\n", info.Config.Name, info.Config)
		s, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			return "", 0, err
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return "", 0, fmt.Errorf("stream %s seq %d: %w", info.Config.Name, seq, err)
			}
			msgs++
			fmt.Fprintf(&b, "-- %s #%d %s\n", info.Config.Name, m.Sequence, m.Subject)
			for k, vs := range m.Header {
				fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(vs, ", "))
			}
			b.Write(m.Data)
			b.WriteByte('\n')
		}
		cons := s.ListConsumers(ctx)
		for ci := range cons.Info() {
			fmt.Fprintf(&b, "== consumer %s %+v\n", ci.Name, ci.Config)
		}
		if err := cons.Err(); err != nil {
			return "", 0, fmt.Errorf("consumers of %s: %w", info.Config.Name, err)
		}
	}
	return b.String(), msgs, nil
}

// DumpKV writes every key, value and history entry of every key-value
// bucket.
func DumpKV(ctx context.Context, js jetstream.JetStream) (string, error) {
	var b strings.Builder
	names := js.KeyValueStoreNames(ctx)
	var buckets []string
	for n := range names.Name() {
		buckets = append(buckets, n)
	}
	if err := names.Error(); err != nil {
		return "", fmt.Errorf("kv buckets: %w", err)
	}
	for _, name := range buckets {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return "", err
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return "", err
		}
		var all []string
		for k := range keys.Keys() {
			all = append(all, k)
		}
		for _, k := range all {
			hist, err := kv.History(ctx, k)
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return "", fmt.Errorf("kv %s key %s: %w", name, k, err)
			}
			for _, e := range hist {
				fmt.Fprintf(&b, "%s/%s rev %d %s: %s\n", name, k, e.Revision(), e.Operation(), e.Value())
			}
		}
	}
	return b.String(), nil
}

// DumpRedis writes every key of the server with its type and whole value.
func DumpRedis(ctx context.Context, rdb *redis.Client) (string, int, error) {
	var b strings.Builder
	n := 0
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return "", 0, err
	}
	sort.Strings(keys)
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			return "", 0, err
		}
		var v any
		switch typ {
		case "none":
			continue // expired between SCAN and TYPE
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "list":
			v, err = rdb.LRange(ctx, k, 0, -1).Result()
		case "set":
			v, err = rdb.SMembers(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "stream":
			v, err = rdb.XRange(ctx, k, "-", "+").Result()
		default:
			v, err = rdb.Dump(ctx, k).Result()
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", 0, fmt.Errorf("key %s (%s): %w", k, typ, err)
		}
		n++
		fmt.Fprintf(&b, "%s (%s) = %v\n", k, typ, v)
	}
	return b.String(), n, nil
}

// NATSTap records every message published on the account (subject,
// headers, data) from the moment it starts.
type NATSTap struct {
	sub  *nats.Subscription
	mu   sync.Mutex
	b    strings.Builder
	msgs int
}

func StartNATSTap(t *testing.T, nc *nats.Conn) *NATSTap {
	t.Helper()
	tap := &NATSTap{}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		tap.mu.Lock()
		defer tap.mu.Unlock()
		tap.msgs++
		fmt.Fprintf(&tap.b, "-- %s reply=%s\n", m.Subject, m.Reply)
		for k, vs := range m.Header {
			fmt.Fprintf(&tap.b, "%s: %s\n", k, strings.Join(vs, ", "))
		}
		tap.b.Write(m.Data)
		tap.b.WriteByte('\n')
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tap.sub = sub
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tap
}

func (tap *NATSTap) Text() (string, int) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.b.String(), tap.msgs
}

func (tap *NATSTap) Reset() {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	tap.b.Reset()
	tap.msgs = 0
}

// RedisMonitor records every command the Redis server runs (MONITOR), by
// a redis-cli process.
type RedisMonitor struct {
	out launch.Buffer
}

func StartRedisMonitor(t *testing.T, srv *redistest.Server) *RedisMonitor {
	t.Helper()
	cli, err := redistest.CLIBinary()
	if err != nil {
		t.Fatal(err)
	}
	m := &RedisMonitor{}
	p, err := launch.Start("redis-cli monitor", cli, []string{"-h", "127.0.0.1", "-p", fmt.Sprint(srv.Port()), "monitor"},
		launch.Options{Stdout: &m.out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	testutil.WaitFor(t, "redis-cli monitor to start", 10*time.Second, func() bool { return strings.HasPrefix(m.out.String(), "OK") })
	return m
}

func (m *RedisMonitor) Text() string { return m.out.String() }

func (m *RedisMonitor) Reset() { m.out.Reset() }

// HTTPGet returns the body of a GET, or the error as text.
func HTTPGet(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
