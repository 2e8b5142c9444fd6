package producer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
)

// config check through the binary: every problem a worker would meet
// before it asks a server, each with its line, exit 2; and the worker
// itself refuses the same file at start with the very same lines (one
// check, used by both). Mended, the check passes (exit 0). No server is
// running anywhere in this test.
func TestCLIConfigCheck(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat\n"), 0o644); err != nil { // not executable yet
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "kf.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`nats: {url: nats://127.0.0.1:1}
pool:
  credentials:
    - {id: key-a, secret_env: CHECK_KEY_A}
    - {id: key-b, secret_file: ` + dir + `/key-b}
jobs:
  exec:
    command: ["` + script + `"]
  kinds:
    resize:
      exec: {command: ["no-such-resizer-xyz"]}
`)
	env := e2etest.CleanEnv(dir)
	check := e2etest.CLIRun{Bin: "producer", Args: []string{"config", "check", "--config", cfg}, Env: env}.Run(t)
	problems := []string{
		"config: " + cfg + `: line 4: pool.credentials[0].secret_env: credential "key-a": environment variable CHECK_KEY_A is not set or is empty`,
		"config: " + cfg + `: line 5: pool.credentials[1].secret_file: credential "key-b": ` + dir + `/key-b cannot be read: no such file or directory`,
		"config: " + cfg + `: line 8: jobs.exec.command[0]: ` + script + ` is not executable`,
		"config: " + cfg + `: line 11: jobs.kinds.resize.exec.command[0]: exec: "no-such-resizer-xyz": executable file not found in $PATH`,
	}
	lines := strings.Split(strings.TrimSpace(check.Stderr), "\n")
	if check.Code != 2 || !slices.Equal(lines[:len(lines)-1], problems) || lines[len(lines)-1] != "producer: "+cfg+": 4 problems: a worker would not start with it" ||
		check.Stdout != "" {
		t.Fatalf("config check: want exit 2 and the 4 problems, each with its line:\n%s", check)
	}
	worker := e2etest.CLIRun{Bin: "worker", Args: []string{"--config", cfg}, Env: env}.Run(t)
	wlines := strings.Split(strings.TrimSpace(worker.Stderr), "\n")
	if worker.Code != 2 || len(wlines) != 4 || wlines[0] != "worker: "+problems[0] || !slices.Equal(wlines[1:], problems[1:]) {
		t.Fatalf("worker: want exit 2 with the same 4 problems before any server is asked:\n%s", worker)
	}

	var out struct {
		Config   string `json:"config"`
		OK       bool   `json:"ok"`
		Problems []struct {
			Line    *int   `json:"line"`
			Message string `json:"message"`
		} `json:"problems"`
	}
	js := e2etest.CLIRun{Bin: "producer", Args: []string{"config", "check", "--json", "--config", cfg}, Env: env}.Run(t)
	e2etest.OneJSON(t, "config check --json", js.Stdout, &out)
	if js.Code != 2 || out.OK || out.Config != cfg || len(out.Problems) != 4 || out.Problems[2].Line == nil || *out.Problems[2].Line != 8 ||
		out.Problems[2].Message != problems[2] {
		t.Fatalf("config check --json: %+v\n%s", out, js)
	}

	// Mended: the secrets there, the script executable, the kind's
	// command one that exists.
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key-b"), []byte("sk-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(strings.Replace(mustRead(t, cfg), "no-such-resizer-xyz", script, 1))
	ok := e2etest.CLIRun{Bin: "producer", Args: []string{"config", "check", "--config", cfg}, Env: append(env, "CHECK_KEY_A=sk-a")}.Run(t)
	if ok.Code != 0 || ok.Stdout != cfg+": ok: a worker starts with this configuration (servers aside).\n" || strings.Contains(ok.Stdout+ok.Stderr, "sk-") {
		t.Fatalf("config check of the mended file: want exit 0 and ok:\n%s", ok)
	}

	// A key the loader does not know: its line and a suggestion.
	write("pool:\n  credentials:\n    - {id: key-a, secret_env: CHECK_KEY_A}\n  cooldwn: 5s\n")
	bad := e2etest.CLIRun{Bin: "producer", Args: []string{"config", "check", "--config", cfg}, Env: env}.Run(t)
	if bad.Code != 2 || !strings.Contains(bad.Stderr, `line 4: unknown key "pool.cooldwn" (did you mean "cooldown"?)`) {
		t.Fatalf("config check of an unknown key:\n%s", bad)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Without --config the binaries find the configuration by themselves:
// $KEYFLEET_CONFIG, else ./keyfleet.yaml, else
// $XDG_CONFIG_HOME/keyfleet/config.yaml, else ~/.config/keyfleet/config.yaml,
// else the built-in defaults. Each file here defines one kind of its own,
// so `enqueue --dry-run` without --kind says which file it read (and,
// with none, that --kind is needed).
func TestCLIConfigDiscovery(t *testing.T) {
	work, home, xdg, other := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	items := filepath.Join(other, "items.jsonl")
	if err := os.WriteFile(items, []byte("{\"id\":\"a\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kindFile := func(path, kind string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("jobs:\n  kinds:\n    "+kind+": {exec: {command: [/bin/cat]}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	dryRun := func(env []string, args ...string) e2etest.Ran {
		t.Helper()
		return e2etest.CLIRun{Bin: "producer", Args: append([]string{"enqueue", "--dry-run", items}, args...), Env: env, Dir: work}.Run(t)
	}
	plans := func(what string, r e2etest.Ran, kind string) {
		t.Helper()
		if r.Code != 0 || !strings.Contains(r.Stdout, "would enqueue 1 items of kind "+kind+" ") {
			t.Errorf("%s: want a dry run of kind %s:\n%s", what, kind, r)
		}
	}

	env := e2etest.CleanEnv(home)
	r := dryRun(env)
	if r.Code != 2 || !strings.Contains(r.Stderr, "--kind is required: the configuration (built-in defaults) defines no job kind") {
		t.Errorf("no file anywhere: want exit 2 asking for --kind:\n%s", r)
	}
	kindFile(filepath.Join(home, ".config", "keyfleet", "config.yaml"), "fromhome")
	plans("~/.config/keyfleet/config.yaml", dryRun(env), "fromhome")
	kindFile(filepath.Join(xdg, "keyfleet", "config.yaml"), "fromxdg")
	plans("$XDG_CONFIG_HOME/keyfleet/config.yaml", dryRun(append(env, "XDG_CONFIG_HOME="+xdg)), "fromxdg")
	kindFile(filepath.Join(work, "keyfleet.yaml"), "fromcwd")
	plans("./keyfleet.yaml", dryRun(append(env, "XDG_CONFIG_HOME="+xdg)), "fromcwd")
	named := kindFile(filepath.Join(other, "env.yaml"), "fromenv")
	plans("$KEYFLEET_CONFIG", dryRun(append(env, "KEYFLEET_CONFIG="+named)), "fromenv")
	flag := kindFile(filepath.Join(other, "flag.yaml"), "fromflag")
	plans("--config", dryRun(append(env, "KEYFLEET_CONFIG="+named), "--config", flag), "fromflag")

	// Every subcommand takes --config, and its help says the order.
	help := e2etest.CLIRun{Bin: "producer", Args: []string{"item", "show", "--help"}, Env: env}.Run(t)
	if help.Code != 0 || !strings.Contains(help.Stdout, "--config string") ||
		!strings.Contains(help.Stdout, "$KEYFLEET_CONFIG, else ./keyfleet.yaml, else $XDG_CONFIG_HOME/keyfleet/config.yaml (~/.config/keyfleet/config.yaml), else built-in defaults") {
		t.Errorf("item show --help: want --config and the discovery order:\n%s", help)
	}
}
