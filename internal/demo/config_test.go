package main

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
)

// config/demo.yaml, the file the demo tells users to copy, is valid.
func TestDemoConfigFileLoads(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "config", "demo.yaml")
	cfg, err := config.Load(p, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pool.Credentials) != 3 || cfg.Jobs.HTTP == nil {
		t.Fatalf("unexpected config: %+v", cfg)
	}
}
