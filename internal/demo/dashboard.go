package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// dashboardLine is what `producer dashboard` prints once it listens.
var dashboardLine = regexp.MustCompile(`on (http://[^/\s]+/)`)

// startDashboard runs `producer dashboard` on addr (a free port if addr is
// taken) for the whole demo and returns its URL.
func (d *demo) startDashboard(addr string) (string, error) {
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
	} else {
		addr = "127.0.0.1:0" // 8080 is taken: any free port
	}
	logPath := filepath.Join(d.dir, "dashboard.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(d.bin, "producer"), "dashboard", "--config", d.cfg, "--listen", addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", fmt.Errorf("start the dashboard: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	d.onCleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := os.ReadFile(logPath)
		if m := dashboardLine.FindSubmatch(out); m != nil {
			return string(m[1]), nil
		}
		select {
		case <-done:
			return "", fmt.Errorf("the dashboard exited: %s", strings.TrimSpace(string(out)))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("the dashboard did not start within 15s (log: %s)", logPath)
}
