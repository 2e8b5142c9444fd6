package jobs_test

import (
	"slices"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

func TestRegistry(t *testing.T) {
	names := jobs.Names()
	if !slices.Equal(names, []string{"exec", "http", "sleep"}) {
		t.Fatalf("kinds: %v", names)
	}
	if _, ok := jobs.Lookup(jobs.DefaultKind); !ok {
		t.Fatalf("the default kind %q is not registered", jobs.DefaultKind)
	}
	if _, ok := jobs.Lookup("nope"); ok {
		t.Fatal("Lookup found an unknown kind")
	}
	for _, k := range jobs.Kinds() {
		if k.Name == "" || k.New == nil {
			t.Errorf("kind %+v: want a name and a constructor", k)
		}
		if k.Section != nil && k.Section() == k.Section() {
			t.Errorf("%s: Section must return a new section each time", k.Name)
		}
	}
	// The handler a kind builds says its name.
	sleep, _ := jobs.Lookup(jobs.KindSleep)
	h, err := sleep.New(nil, jobs.Common{})
	built(t, jobs.KindSleep, h, err)
	exec, _ := jobs.Lookup(jobs.KindExec)
	sec := exec.Section()
	sec.(*jobs.ExecConfig).Command = []string{"sh", "-c", "exit 0"}
	h, err = exec.New(sec, jobs.Common{MaxOutput: 10})
	built(t, jobs.KindExec, h, err)
	http, _ := jobs.Lookup(jobs.KindHTTP)
	sec = http.Section()
	sec.(*jobs.HTTPConfig).URL = "http://127.0.0.1:1/x"
	h, err = http.New(sec, jobs.Common{})
	built(t, jobs.KindHTTP, h, err)
	// A section's defaults pass its own checks, but for the required keys.
	if got := http.Section().Check(); len(got) != 1 || got[0].Key != "url" {
		t.Errorf("http defaults: %+v", got)
	}
}

// built returns the handler a constructor built, failing the test on its
// error or when the handler is not of kind.
func built(t *testing.T, kind string, h jobs.Handler, err error) jobs.Handler {
	t.Helper()
	if err != nil {
		t.Fatalf("new %s handler: %v", kind, err)
	}
	if h.Kind() != kind {
		t.Fatalf("Kind() = %q, want %q", h.Kind(), kind)
	}
	return h
}
