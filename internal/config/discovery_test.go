package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/config"
)

// The file is found in the documented order: --config, $KEYFLEET_CONFIG,
// ./keyfleet.yaml, $XDG_CONFIG_HOME/keyfleet/config.yaml (an absolute
// one), ~/.config/keyfleet/config.yaml, else the built-in defaults. Each
// place is taken only when the ones before it give nothing.
func TestConfigDiscoveryOrder(t *testing.T) {
	work, xdg, home := t.TempDir(), t.TempDir(), t.TempDir()
	t.Chdir(work)
	write := func(path, concurrency string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("worker: {concurrency: "+concurrency+"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	named := write(filepath.Join(t.TempDir(), "named.yaml"), "11")
	fromEnv := write(filepath.Join(t.TempDir(), "env.yaml"), "12")
	xdgFile := filepath.Join(xdg, "keyfleet", "config.yaml")
	homeFile := filepath.Join(home, ".config", "keyfleet", "config.yaml")
	vars := map[string]string{"KEYFLEET_CONFIG": fromEnv, "XDG_CONFIG_HOME": xdg, "HOME": home}

	load := func(path string, vars map[string]string) (int, string) {
		t.Helper()
		c, err := config.Load(path, env(vars))
		if err != nil {
			t.Fatal(err)
		}
		return c.Worker.Concurrency, c.Source
	}
	check := func(what string, path string, vars map[string]string, want int, source string) {
		t.Helper()
		if n, src := load(path, vars); n != want || src != source {
			t.Errorf("%s: concurrency %d from %s, want %d from %s", what, n, src, want, source)
		}
	}

	check("nothing anywhere", "", map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": home}, 3, config.DefaultsSource)
	write(homeFile, "15")
	check("~/.config only", "", map[string]string{"HOME": home}, 15, homeFile)
	check("a relative XDG_CONFIG_HOME is ignored", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": "rel"}, 15, homeFile)
	check("an XDG_CONFIG_HOME without the file: not ~/.config either", "", vars, 12, fromEnv)
	write(xdgFile, "14")
	check("XDG over ~/.config", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, 14, xdgFile)
	write(filepath.Join(work, "keyfleet.yaml"), "13")
	check("./keyfleet.yaml over XDG", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, 13, "keyfleet.yaml")
	check("$KEYFLEET_CONFIG over ./keyfleet.yaml", "", vars, 12, fromEnv)
	check("--config over all", named, vars, 11, named)

	// A directory named keyfleet.yaml is not a file: looked past.
	if err := os.Remove(filepath.Join(work, "keyfleet.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(work, "keyfleet.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	check("a directory ./keyfleet.yaml", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, 14, xdgFile)

	// A found file's problems name it.
	if err := os.WriteFile(xdgFile, []byte("worker: {concurrency: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load("", env(map[string]string{"XDG_CONFIG_HOME": xdg}))
	if err == nil || !strings.Contains(err.Error(), xdgFile+": line 1: worker.concurrency") {
		t.Fatalf("a bad found file: %v", err)
	}
	if !strings.Contains(config.DiscoveryHelp, "./keyfleet.yaml") || !strings.Contains(config.DiscoveryHelp, "$XDG_CONFIG_HOME/keyfleet/config.yaml") {
		t.Errorf("DiscoveryHelp: %s", config.DiscoveryHelp)
	}
}

// Problems that checks after loading find are placed on their keys' lines
// as validation's are; a value that came from a flag or the environment
// gets no line, only where it came from. CheckSecrets names the key of the
// secret that cannot be read, never its value.
func TestLoadedPlacesLaterProblems(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(secretFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "kf.yaml", `pool:
  credentials:
    - {id: key-a, secret_env: KEY_A}
    - id: key-b
      secret_file: `+secretFile+`
    - id: key-c
      secret_file: /nonexistent/key-c
    - {id: key-d, secret_env: KEY_D}
`)
	l, err := config.Read(path, env(map[string]string{"KEY_D": "sk-d-value"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	got := errLines(l.Problems(l.Config.CheckSecrets(env(map[string]string{"KEY_D": "sk-d-value"}))))
	want := []string{
		"config: " + path + `: line 3: pool.credentials[0].secret_env: credential "key-a": environment variable KEY_A is not set or is empty`,
		"config: " + path + `: line 5: pool.credentials[1].secret_file: credential "key-b": ` + secretFile + " is empty",
		"config: " + path + `: line 7: pool.credentials[2].secret_file: credential "key-c": /nonexistent/key-c cannot be read: no such file or directory`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	l.Config.NATS.URL = "http://x"
	l.Note("nats.url", "--nats-url")
	err = l.Problems(check.List{{Key: "nats.url", Msg: "bad"}, {Key: "pool.credentials[3].max_concurrent", Msg: "worse"}})
	if want := "config: " + path + ": nats.url (from --nats-url): bad\nconfig: " + path + ": line 8: pool.credentials[3].max_concurrent: worse"; err == nil || err.Error() != want {
		t.Fatalf("want\n%s\ngot\n%v", want, err)
	}
	if l.Problems(nil) != nil {
		t.Fatal("no problem: want nil")
	}
}
