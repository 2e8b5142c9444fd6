package configcheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/configcheck"
)

func write(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

// Every problem a worker would meet before it asks a server, each on its
// line: a secret variable unset, a secret file missing, an exec command
// not found, one not executable, a probe command not found; a kind whose
// section validation refuses is reported once, by validation.
func TestCheckListsEveryProblemOnItsLine(t *testing.T) {
	dir := t.TempDir()
	script := write(t, dir, "job.sh", "#!/bin/sh\n", 0o644) // not executable
	cfg := write(t, dir, "kf.yaml", `pool:
  probe_interval: 1m
  credentials:
    - {id: key-a, secret_env: KEY_A}
    - {id: key-b, secret_file: `+dir+`/missing}
    - {id: key-c, secret_env: KEY_C}
jobs:
  exec:
    command: ["`+script+`"]
    probe_command: ["no-such-probe-xyz"]
  kinds:
    resize:
      exec:
        command: ["no-such-command-xyz", "--fast"]
    broken:
      exec:
        command: []
`, 0o600)
	l, err := config.Read(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = configcheck.Check(l, env(map[string]string{"KEY_C": "sk-c"}))
	if err == nil {
		t.Fatal("want problems")
	}
	got := err.Error()
	for _, want := range []string{
		cfg + `: line 17: jobs.kinds.broken.exec.command: `,
		cfg + `: line 4: pool.credentials[0].secret_env: credential "key-a": environment variable KEY_A is not set or is empty`,
		cfg + `: line 5: pool.credentials[1].secret_file: credential "key-b": ` + dir + `/missing cannot be read: no such file or directory`,
		cfg + `: line 9: jobs.exec.command[0]: ` + script + ` is not executable`,
		cfg + `: line 14: jobs.kinds.resize.exec.command[0]: exec: "no-such-command-xyz": executable file not found in $PATH`,
		cfg + `: line 10: jobs.exec.probe_command[0]: exec: "no-such-probe-xyz": executable file not found in $PATH`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 6 {
		t.Errorf("want 6 problems, one a line; got %d:\n%s", n, got)
	}
	if strings.Contains(got, "sk-c") {
		t.Errorf("a secret in the output:\n%s", got)
	}

	// Mended, it passes.
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "missing", "sk-b\n", 0o600)
	good := write(t, dir, "good.yaml", `pool:
  credentials:
    - {id: key-a, secret_env: KEY_A}
    - {id: key-b, secret_file: `+dir+`/missing}
jobs:
  exec: {command: ["`+script+`"], persistent: true}
  kinds:
    chat:
      http: {url: "http://127.0.0.1:1/v1/chat"}
`, 0o600)
	if l, err = config.Read(good, nil); err != nil {
		t.Fatal(err)
	}
	if err := configcheck.Check(l, env(map[string]string{"KEY_A": "sk-a"})); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
}

// The built-in defaults have no credentials: a worker would not start.
func TestCheckDefaults(t *testing.T) {
	t.Chdir(t.TempDir())
	l, err := config.Read("", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = configcheck.Check(l, env(nil))
	if err == nil || err.Error() != "config: built-in defaults: pool.credentials: is empty: a worker needs at least one credential" {
		t.Fatalf("got %v", err)
	}
}
