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
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
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
	if len(c.Pool.Credentials) == 0 {
		t.Fatalf("the reference must show credentials; got %+v", c)
	}
	if got := c.Pool.Credentials[0].MaxConcurrent; got != 1 {
		t.Errorf("pool.credentials[0].max_concurrent: want the default 1, got %d", got)
	}
	for _, k := range jobs.Kinds() {
		if k.Section == nil {
			continue
		}
		sec, ok := c.Jobs.Section(k.Name)
		if !ok {
			t.Errorf("the reference must show the section jobs.%s", k.Name)
			continue
		}
		// Every key with a default shows it; the others are examples.
		got, def := reflect.ValueOf(sec).Elem(), reflect.ValueOf(k.Section()).Elem()
		for i := range def.NumField() {
			if def.Field(i).IsZero() {
				continue
			}
			if g, d := got.Field(i).Interface(), def.Field(i).Interface(); !reflect.DeepEqual(g, d) {
				t.Errorf("jobs.%s: %s: want the default %v, got %v", k.Name, def.Type().Field(i).Name, d, g)
			}
		}
	}
	c.Pool.Credentials, c.Pool.Accounts, c.Jobs.Exec, c.Jobs.HTTP, c.Jobs.Kinds = nil, nil, nil, nil, nil
	c.Pool.Scope = config.Scope{}       // the scope field the example limits need
	c.Pool.Prices, c.Tenants = nil, nil // examples
	c.Gateway.Tokens = nil              // an example
	if len(c.Queue.RedeliveryBackoff) == 0 {
		c.Queue.RedeliveryBackoff = nil // [] in the file
	}
	want := config.Default()
	want.Source = referencePath
	if !reflect.DeepEqual(c, want) {
		t.Errorf("reference values differ from Default():\nwant %+v\ngot  %+v", want, c)
	}
}

// Every job kind with settings has its section in config.Jobs, under its
// name and of its type, and every section there is a kind's.
func TestJobSections(t *testing.T) {
	fields := map[string]reflect.Type{}
	jt := reflect.TypeFor[config.Jobs]()
	for i := range jt.NumField() {
		if f := jt.Field(i); f.Type.Kind() == reflect.Pointer {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			fields[name] = f.Type
		}
	}
	for _, k := range jobs.Kinds() {
		if k.Section == nil {
			if _, ok := fields[k.Name]; ok {
				t.Errorf("jobs.%s: the kind takes no settings, but config.Jobs has a section for it", k.Name)
			}
			continue
		}
		if want := reflect.TypeOf(k.Section()); fields[k.Name] != want {
			t.Errorf("jobs.%s: want a field of type %v in config.Jobs, got %v", k.Name, want, fields[k.Name])
		}
		delete(fields, k.Name)
	}
	for name := range fields {
		t.Errorf("config.Jobs has a section %s for no job kind", name)
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
		if !covered(key, inFile) {
			t.Errorf("config/reference.yaml lacks the key %s", key)
		}
	}
}

// The config example of the pinned user interface (copied verbatim into
// testdata) is a valid config.
func TestDesignExample(t *testing.T) {
	c, err := config.Load("testdata/design_example.yaml", env(nil))
	if err != nil {
		t.Fatalf("the pinned config example: %v", err)
	}
	if c.Worker.Listen != "127.0.0.1:9464" || c.Jobs.Exec == nil || c.Jobs.HTTP == nil ||
		len(c.Pool.Credentials) != 1 || c.Pool.Credentials[0].Rate.N != 60 || c.Pool.Credentials[0].Rate.Period != time.Minute {
		t.Fatalf("the pinned config example read wrongly: %+v", c)
	}
}

// typePaths lists the YAML key paths of a type; list items are "[]", the
// keys of a map "*". A value the decoder reads as one (ratelimit.Limit:
// N/PERIOD) has no keys; a creds.Limit has the keys the file writes. Under
// a map, a section of a type already listed elsewhere (jobs.kinds.*.http
// is a jobs.http) is listed, not its keys again.
func typePaths(t reflect.Type) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t {
		case reflect.TypeFor[ratelimit.Limit]():
			return
		case reflect.TypeFor[creds.Limit]():
			t = reflect.TypeFor[config.LimitFile]()
		}
		if t.Kind() == reflect.Struct {
			if seen[t] && strings.Contains(prefix, "*") {
				return
			}
			seen[t] = true
		}
		switch t.Kind() {
		case reflect.Map:
			walk(t.Elem(), prefix+".*")
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

// covered reports whether the reference sets key, whose "*" stands for any
// one key of a map.
func covered(key string, inFile map[string]bool) bool {
	if !strings.Contains(key, "*") {
		return inFile[key]
	}
	want := strings.Split(key, ".")
	for p := range inFile {
		if got := strings.Split(p, "."); len(got) == len(want) && matches(want, got) {
			return true
		}
	}
	return false
}

func matches(pattern, key []string) bool {
	for i := range pattern {
		if pattern[i] != "*" && pattern[i] != key[i] {
			return false
		}
	}
	return true
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
