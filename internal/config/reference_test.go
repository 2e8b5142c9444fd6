package config_test

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keyfleet/keyfleet/internal/config"
)

const referencePath = "../../config/reference.yaml"

// The documented reference must load, validate, and show the defaults.
func TestReferenceValidates(t *testing.T) {
	c, err := config.Load(referencePath, env(nil))
	if err != nil {
		t.Fatalf("config/reference.yaml: %v", err)
	}
	// The credentials and job kinds are examples; every other value must be
	// the default, so that the reference documents the defaults truly.
	if c.Jobs.Exec == nil || c.Jobs.HTTP == nil || len(c.Pool.Credentials) == 0 {
		t.Fatalf("the reference must show credentials and both job kinds; got %+v", c)
	}
	if got, want := c.Jobs.Exec.Timeout, 10*time.Minute; got != want {
		t.Errorf("jobs.exec.timeout: want the default %s, got %s", want, got)
	}
	h := c.Jobs.HTTP
	if h.Method != "POST" || h.Header != "Authorization" || h.Format != "Bearer {secret}" || h.Timeout != time.Minute {
		t.Errorf("jobs.http: want the defaults POST, Authorization, \"Bearer {secret}\", 1m0s; got %q, %q, %q, %s",
			h.Method, h.Header, h.Format, h.Timeout)
	}
	if got := c.Pool.Credentials[0].MaxConcurrent; got != 1 {
		t.Errorf("pool.credentials[0].max_concurrent: want the default 1, got %d", got)
	}
	c.Pool.Credentials, c.Jobs.Exec, c.Jobs.HTTP = nil, nil, nil
	if len(c.Queue.RedeliveryBackoff) == 0 {
		c.Queue.RedeliveryBackoff = nil // [] in the file
	}
	want := config.Default()
	want.Source = referencePath
	if !reflect.DeepEqual(c, want) {
		t.Errorf("reference values differ from Default():\nwant %+v\ngot  %+v", want, c)
	}
}

// Every key of Config appears in the reference, so it cannot fall behind.
func TestReferenceCoversEveryKey(t *testing.T) {
	data, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	nodePaths(doc.Content[0], "", inFile)
	for _, key := range typePaths(reflect.TypeFor[config.Config]()) {
		if !inFile[key] {
			t.Errorf("config/reference.yaml lacks the key %s", key)
		}
	}
}

// DESIGN.md's example (pinned interface) is a valid config.
func TestDesignExample(t *testing.T) {
	c, err := config.Load("testdata/design_example.yaml", env(nil))
	if err != nil {
		t.Fatalf("DESIGN.md example: %v", err)
	}
	if c.Worker.Listen != "127.0.0.1:9464" || c.Jobs.Exec == nil || c.Jobs.HTTP == nil ||
		len(c.Pool.Credentials) != 1 || c.Pool.Credentials[0].Rate.N != 60 || c.Pool.Credentials[0].Rate.Period != time.Minute {
		t.Fatalf("DESIGN.md example read wrongly: %+v", c)
	}
}

// typePaths lists the YAML key paths of a type; list items are "[]".
func typePaths(t reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				if name == "-" || !f.IsExported() {
					continue
				}
				p := name
				if prefix != "" {
					p = prefix + "." + name
				}
				out = append(out, p)
				walk(f.Type, p)
			}
		case reflect.Slice:
			walk(t.Elem(), prefix+"[]")
		}
	}
	walk(t, "")
	slices.Sort(out)
	return out
}

// nodePaths adds the key paths of a YAML node to out; list items are "[]".
func nodePaths(n *yaml.Node, prefix string, out map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if prefix != "" {
				p = prefix + "." + p
			}
			out[p] = true
			nodePaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			nodePaths(e, prefix+"[]", out)
		}
	}
}
