package faultproxy_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/faultproxy"
)

// echoServer echoes every connection until the client closes its side,
// then closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *faultproxy.Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads it back, within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

// echoThroughProxy starts an echo server behind a proxy and returns the
// proxy and a connection through it that has echoed warm.
func echoThroughProxy(t *testing.T, warm string) (*faultproxy.Proxy, *net.TCPConn) {
	t.Helper()
	p := faultproxy.Start(t, echoServer(t))
	c := dial(t, p)
	if err := roundTrip(c, []byte(warm), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return p, c
}

func TestForwardsBothWaysIntact(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := make([]byte, 1<<20)
			_, _ = rand.Read(msg)
			go func() { _, _ = c.Write(msg); _ = c.(*net.TCPConn).CloseWrite() }()
			got, err := io.ReadAll(c) // the end of stream travels both ways
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- errors.New("data corrupted")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Accepted != 8 {
		t.Fatalf("stats %+v, want 8 accepted", s)
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	p, c := echoThroughProxy(t, "warm")
	p.SetLatency(40*time.Millisecond, 20*time.Millisecond)
	for i := range 5 {
		start := time.Now()
		if err := roundTrip(c, []byte{byte(i)}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// Both directions are delayed: at least twice the base.
		if rtt := time.Since(start); rtt < 80*time.Millisecond {
			t.Fatalf("round trip %s with 40ms+ each way", rtt)
		}
	}
	p.SetLatency(0, 0)
	start := time.Now()
	if err := roundTrip(c, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt > 2*time.Second {
		t.Fatalf("round trip %s after the latency was removed", rtt)
	}
}

func TestLatencyKeepsOrder(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	p.SetLatency(time.Millisecond, 30*time.Millisecond)
	c := dial(t, p)
	var want bytes.Buffer
	go func() {
		for i := range 200 {
			_, _ = c.Write([]byte{byte(i)})
			time.Sleep(time.Millisecond) // separate chunks, each with its own jitter
		}
	}()
	for i := range 200 {
		want.WriteByte(byte(i))
	}
	got := make([]byte, 200)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("bytes reordered: %v", got)
	}
}

func TestResetAllAbortsOpenConnections(t *testing.T) {
	p, c := echoThroughProxy(t, "hi")
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after reset: %v, want ECONNRESET", err)
	}
	// New connections go through.
	if err := roundTrip(dial(t, p), []byte("again"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Reset != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPartitionStallsThenHealDelivers(t *testing.T) {
	p, old := echoThroughProxy(t, "before")
	p.Partition()
	if !p.Partitioned() {
		t.Fatal("not partitioned")
	}
	if _, err := old.Write([]byte("during")); err != nil {
		t.Fatal(err)
	}
	// A new connection is accepted but gets no answer.
	fresh := dial(t, p)
	if _, err := fresh.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{old, fresh} {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) // the partition's length
		if n, err := c.Read(make([]byte, 16)); n != 0 || !isTimeout(err) {
			t.Fatalf("read during the partition: n=%d err=%v, want a timeout", n, err)
		}
	}
	p.Heal()
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{old, "during"}, {fresh, "new"}} {
		_ = tc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(tc.want))
		if _, err := io.ReadFull(bufio.NewReader(tc.c), got); err != nil || string(got) != tc.want {
			t.Fatalf("after heal: %q %v, want %q", got, err, tc.want)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestResetDuringPartitionAndClose(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Partition()
	c := dial(t, p)
	waitOpen(t, p, 1)
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("reset %d held connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v, want ECONNRESET", err)
	}
	p.Heal()
	dial(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if s := p.Stats(); s.Open != 0 {
		t.Fatalf("%d connections open after Close", s.Open)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("dial after Close succeeded")
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := faultproxy.Start(t, addr)
	// The reset may come before the dial returns or at the first read.
	if c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("read through a proxy to nothing: %v, want the connection closed", err)
		}
	}
	if _, err := faultproxy.New("no-port"); err == nil {
		t.Fatal("New accepted a target without a port")
	}
}

func waitOpen(t *testing.T, p *faultproxy.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Open != n {
		if time.Now().After(deadline) {
			t.Fatalf("open connections: %d, want %d", p.Stats().Open, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pending proxy holds connections, unanswered, until its target is set;
// then they go through.
func TestPendingHoldsUntilTargetSet(t *testing.T) {
	target := echoServer(t) // first: its cleanup waits for the connections
	p := faultproxy.StartPending(t)
	if p.Target() != "" {
		t.Fatalf("Target() = %q before SetTarget", p.Target())
	}
	c := dial(t, p)
	if _, err := c.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 5)); !isTimeout(err) {
		t.Fatalf("read through a pending proxy: %d bytes, %v; want nothing", n, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := p.SetTarget(target); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "early" {
		t.Fatalf("held data after SetTarget: %q %v", got, err)
	}
	if err := roundTrip(dial(t, p), []byte("later"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.SetTarget(target); err == nil {
		t.Fatal("SetTarget accepted a second target")
	}
	if p.Target() != target {
		t.Fatalf("Target() = %q, want %q", p.Target(), target)
	}
}
