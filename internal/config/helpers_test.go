package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes content to a fresh file and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// env returns a getenv over a fixed map.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// errLines splits a joined error into its lines.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}
