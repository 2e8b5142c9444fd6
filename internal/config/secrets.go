package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// maxSecretFile bounds a secret_file: anything larger is not an API key.
const maxSecretFile = 64 << 10

// ResolveSecrets reads every credential's secret, from its secret_env
// variable (through getenv; os.Getenv when nil) or its secret_file (one
// trailing newline dropped), and returns them by credential ID.
//
// An unset or empty variable, or a secret_file that cannot be read, is empty
// or is over 64 KiB, is an error naming the credential and the variable or
// file, never the value. All such problems are reported in one error.
func (c *Config) ResolveSecrets(getenv func(string) string) (map[string]secret.Secret, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	out := make(map[string]secret.Secret, len(c.Pool.Credentials))
	var ps problems
	for i, cr := range c.Pool.Credentials {
		key := fmt.Sprintf("pool.credentials[%d] (%s)", i, quote(cr.ID))
		switch {
		case cr.SecretEnv != "" && cr.SecretFile != "":
			ps.add(key, "set exactly one of secret_env or secret_file")
		case cr.SecretEnv != "":
			v := getenv(cr.SecretEnv)
			if strings.TrimSpace(v) == "" {
				ps.add(key, "environment variable %s (secret_env) is not set or is empty", cr.SecretEnv)
				continue
			}
			out[cr.ID] = secret.New(v)
		case cr.SecretFile != "":
			v, msg := readSecretFile(cr.SecretFile)
			if msg != "" {
				ps.add(key, "secret_file %s %s", cr.SecretFile, msg)
				continue
			}
			out[cr.ID] = secret.New(v)
		default:
			ps.add(key, "set exactly one of secret_env or secret_file")
		}
	}
	if err := ps.err(c.Source, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// readSecretFile returns the secret in path, or a message saying what is
// wrong with the file; the message never holds the file's content.
func readSecretFile(path string) (string, string) {
	f, err := os.Open(path)
	if err != nil {
		return "", "cannot be read: " + pathErrCause(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	switch {
	case err != nil:
		return "", "cannot be read: " + pathErrCause(err)
	case len(b) > maxSecretFile:
		return "", "is larger than 64 KiB; is it the right file?"
	}
	s := string(b)
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		s = strings.TrimSuffix(t, "\r")
	}
	if strings.TrimSpace(s) == "" {
		return "", "is empty"
	}
	return s, ""
}

func pathErrCause(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// SecretEnvNames returns every secret_env name, in config order, each once.
// The worker strips these from the environment of the jobs it runs.
func (c *Config) SecretEnvNames() []string {
	var names []string
	seen := map[string]bool{}
	for _, cr := range c.Pool.Credentials {
		if cr.SecretEnv != "" && !seen[cr.SecretEnv] {
			seen[cr.SecretEnv] = true
			names = append(names, cr.SecretEnv)
		}
	}
	return names
}
