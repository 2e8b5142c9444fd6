package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
)

func credConfig(creds ...config.Credential) *config.Config {
	c := config.Default()
	c.Source = "/etc/kf.yaml"
	for i := range creds {
		creds[i].MaxConcurrent = 1
	}
	c.Pool.Credentials = creds
	return c
}

func TestResolveSecrets(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		creds []config.Credential
		vars  map[string]string
		want  map[string]string
	}{
		{
			name:  "from the environment, as is",
			creds: []config.Credential{{ID: "a", SecretEnv: "KEY_A"}},
			vars:  map[string]string{"KEY_A": "sk-a 1\n"},
			want:  map[string]string{"a": "sk-a 1\n"},
		},
		{
			name:  "from a file, one trailing newline dropped",
			creds: []config.Credential{{ID: "b", SecretFile: file("b", "sk-b\n")}},
			want:  map[string]string{"b": "sk-b"},
		},
		{
			name:  "from a file, only one newline dropped",
			creds: []config.Credential{{ID: "b", SecretFile: file("b2", "sk-b\n\n")}},
			want:  map[string]string{"b": "sk-b\n"},
		},
		{
			name:  "from a file, CRLF dropped",
			creds: []config.Credential{{ID: "b", SecretFile: file("b3", "sk-b\r\n")}},
			want:  map[string]string{"b": "sk-b"},
		},
		{
			name:  "from a file without a newline",
			creds: []config.Credential{{ID: "b", SecretFile: file("b4", "sk-b")}},
			want:  map[string]string{"b": "sk-b"},
		},
		{
			name: "both ways, several credentials",
			creds: []config.Credential{
				{ID: "a", SecretEnv: "KEY_A"},
				{ID: "b", SecretFile: file("b5", "sk-b\n")},
				{ID: "c", SecretEnv: "KEY_A"},
			},
			vars: map[string]string{"KEY_A": "sk-a"},
			want: map[string]string{"a": "sk-a", "b": "sk-b", "c": "sk-a"},
		},
		{
			name: "no credentials",
			want: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := credConfig(tt.creds...).ResolveSecrets(env(tt.vars))
			if err != nil {
				t.Fatalf("ResolveSecrets: %v", err)
			}
			revealed := map[string]string{}
			for id, s := range got {
				revealed[id] = s.Reveal()
			}
			if fmt.Sprint(revealed) != fmt.Sprint(tt.want) {
				t.Fatalf("want %q, got %q", tt.want, revealed)
			}
		})
	}
}

func TestResolveSecretsErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	blank := filepath.Join(dir, "blank")
	huge := filepath.Join(dir, "huge")
	unreadable := filepath.Join(dir, "unreadable")
	for name, content := range map[string]string{empty: "", blank: "\n", huge: strings.Repeat("x", 64<<10+1), unreadable: "sk-x"} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	c := credConfig(
		config.Credential{ID: "ok", SecretEnv: "KEY_OK"},
		config.Credential{ID: "unset", SecretEnv: "KEY_UNSET"},
		config.Credential{ID: "empty-env", SecretEnv: "KEY_EMPTY"},
		config.Credential{ID: "blank-env", SecretEnv: "KEY_BLANK"},
		config.Credential{ID: "missing", SecretFile: missing},
		config.Credential{ID: "empty-file", SecretFile: empty},
		config.Credential{ID: "blank-file", SecretFile: blank},
		config.Credential{ID: "dir", SecretFile: dir},
		config.Credential{ID: "huge", SecretFile: huge},
		config.Credential{ID: "neither"},
	)
	vars := map[string]string{"KEY_OK": "sk-ok-secret", "KEY_EMPTY": "", "KEY_BLANK": "  "}
	got, err := c.ResolveSecrets(env(vars))
	if got != nil {
		t.Errorf("want no secrets with the error, got %d", len(got))
	}
	want := []string{
		`config: /etc/kf.yaml: pool.credentials[1] ("unset"): environment variable KEY_UNSET (secret_env) is not set or is empty`,
		`config: /etc/kf.yaml: pool.credentials[2] ("empty-env"): environment variable KEY_EMPTY (secret_env) is not set or is empty`,
		`config: /etc/kf.yaml: pool.credentials[3] ("blank-env"): environment variable KEY_BLANK (secret_env) is not set or is empty`,
		`config: /etc/kf.yaml: pool.credentials[4] ("missing"): secret_file ` + missing + ` cannot be read: no such file or directory`,
		`config: /etc/kf.yaml: pool.credentials[5] ("empty-file"): secret_file ` + empty + ` is empty`,
		`config: /etc/kf.yaml: pool.credentials[6] ("blank-file"): secret_file ` + blank + ` is empty`,
		`config: /etc/kf.yaml: pool.credentials[7] ("dir"): secret_file ` + dir + ` cannot be read: is a directory`,
		`config: /etc/kf.yaml: pool.credentials[8] ("huge"): secret_file ` + huge + ` is larger than 64 KiB; is it the right file?`,
		`config: /etc/kf.yaml: pool.credentials[9] ("neither"): set exactly one of secret_env or secret_file`,
	}
	if lines := errLines(err); !slices.Equal(lines, want) {
		t.Fatalf("error mismatch\nwant:\n%s\ngot:\n%s", strings.Join(want, "\n"), strings.Join(lines, "\n"))
	}
	if strings.Contains(err.Error(), "sk-ok-secret") {
		t.Fatalf("error holds a secret: %v", err)
	}

	if os.Geteuid() != 0 { // root reads anything
		if err := os.Chmod(unreadable, 0); err != nil {
			t.Fatal(err)
		}
		_, err := credConfig(config.Credential{ID: "x", SecretFile: unreadable}).ResolveSecrets(env(nil))
		want := `config: /etc/kf.yaml: pool.credentials[0] ("x"): secret_file ` + unreadable + ` cannot be read: permission denied`
		if err == nil || err.Error() != want {
			t.Fatalf("want %q, got %v", want, err)
		}
	}
}

func TestSecretEnvNames(t *testing.T) {
	c := credConfig(
		config.Credential{ID: "a", SecretEnv: "KEY_B"},
		config.Credential{ID: "b", SecretFile: "/run/secrets/b"},
		config.Credential{ID: "c", SecretEnv: "KEY_A"},
		config.Credential{ID: "d", SecretEnv: "KEY_B"},
	)
	if got, want := c.SecretEnvNames(), []string{"KEY_B", "KEY_A"}; !slices.Equal(got, want) {
		t.Fatalf("want %v, got %v", want, got)
	}
	if got := config.Default().SecretEnvNames(); len(got) != 0 {
		t.Fatalf("want none, got %v", got)
	}
}

// No error, and no printed Config, ever holds a secret, wherever a user
// puts one by mistake.
func TestErrorsNeverHoldSecrets(t *testing.T) {
	const s = "sk-live-9f8e7d6c5b4a"
	tests := []struct {
		name string
		yaml string
		vars map[string]string
	}{
		{name: "secret pasted as secret_env", yaml: "pool:\n  credentials:\n    - {id: a, secret_env: " + s + "}\n"},
		{name: "secret pasted into format", yaml: "jobs:\n  http: {url: 'https://api.example.com', format: 'Bearer " + s + "'}\n"},
		{name: "secret in a header value with a line break", yaml: "jobs:\n  http: {url: 'https://api.example.com', headers: {X-Key: \"" + s + "\\n\"}}\n"},
		{name: "secret in an exec env value with a bad name", yaml: "jobs:\n  exec: {command: [x], env: {'API-KEY': " + s + "}}\n"},
		{name: "password in a nats url with a bad scheme", yaml: "nats: {url: 'http://user:" + s + "@n:4222'}\n"},
		{name: "password in a nats url without a scheme", yaml: "nats: {url: 'user:" + s + "@n:4222'}\n"},
		{name: "token in a nats url without a host", yaml: "nats: {url: 'nats://" + s + "@'}\n"},
		{name: "password in a redis url with several hosts", yaml: "redis: {url: 'redis://:" + s + "@h1:7000,h2:7001'}\n"},
		{name: "password in a redis url with a bad port", yaml: "redis: {url: 'redis://:" + s + "@h:99999/0'}\n"},
		{name: "password holding '@' and '/' in a redis url", yaml: "redis: {url: 'redis://:a/" + s + "@b@h:99999/0'}\n"},
		{name: "password holding '/' in a redis url", yaml: "redis: {url: 'redis://" + s[:9] + "/" + s[9:] + "@h/0'}\n"},
		{name: "password holding '/' in a nats url", yaml: "nats: {url: 'nats://u:" + s[:9] + "/" + s[9:] + "@h:4222'}\n"},
		{name: "password in a redis url without a scheme", yaml: "redis: {url: ':" + s + "@h:6379'}\n"},
		{name: "password in an http job url", yaml: "jobs:\n  http: {url: 'ftp://u:" + s + "@h/x'}\n"},
		{name: "password in an http job url without a host", yaml: "jobs:\n  http: {url: 'https://u:" + s + "@/x'}\n"},
		{name: "secret in a broken quoted string", yaml: "jobs:\n  http: {url: 'https://h', format: \"Bearer " + s + "}\n"},
		{name: "secret in a KEYFLEET_NATS_URL", yaml: "", vars: map[string]string{"KEYFLEET_NATS_URL": "http://u:" + s + "@h:4222"}},
		{name: "secret in a KEYFLEET_REDIS_URL", yaml: "", vars: map[string]string{"KEYFLEET_REDIS_URL": "redis://:" + s + "@h:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(writeFile(t, "kf.yaml", tt.yaml), env(tt.vars))
			if err == nil {
				t.Fatal("want an error, got none")
			}
			if strings.Contains(err.Error(), s) || strings.Contains(err.Error(), "9f8e7d") {
				t.Fatalf("error holds the secret: %v", err)
			}
		})
	}

	// A loaded Config holds no secret, however it is printed.
	path := writeFile(t, "kf.yaml", "pool:\n  credentials:\n    - {id: a, secret_env: KEY_A}\n")
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := c.ResolveSecrets(env(map[string]string{"KEY_A": s}))
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v %+v %#v", c, c, c), fmt.Sprintf("%v %+v %#v", secrets, secrets, secrets)} {
		if strings.Contains(out, s) {
			t.Fatalf("printing holds the secret: %s", out)
		}
	}
}
