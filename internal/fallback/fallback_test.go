package fallback_test

import (
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/fallback"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
)

func router(t *testing.T, m *metrics.Metrics) *fallback.Router {
	t.Helper()
	cfg := config.Default()
	cfg.Jobs.Kinds = map[string]config.Kind{
		"chat":  {HTTP: &config.HTTPJob{Provider: "openai"}, Fallback: &config.Fallback{Kinds: []string{"east", "west"}, After: 7e9}},
		"east":  {HTTP: &config.HTTPJob{Provider: "openai-compatible", URL: "https://east.example.com/openai"}},
		"west":  {HTTP: &config.HTTPJob{Provider: "openai-compatible", URL: "https://west.example.com/openai"}},
		"plain": {Exec: &config.ExecJob{Command: []string{"x"}}},
	}
	return fallback.NewRouter(cfg, m)
}

// Next walks a kind's fallbacks in order, past the kinds tried, for
// either reason; a kind without one has none.
func TestNext(t *testing.T) {
	r := router(t, nil)
	for _, c := range []struct {
		kind, why string
		tried     []string
		want      string
		ok        bool
	}{
		{"chat", kftype.FallbackWaited, nil, "east", true},
		{"chat", kftype.FallbackFailing, nil, "east", true},
		{"chat", kftype.FallbackFailing, []string{"east"}, "west", true},
		{"chat", kftype.FallbackWaited, []string{"chat", "east", "west"}, "", false},
		{"chat", "bored", nil, "", false},
		{"plain", kftype.FallbackWaited, nil, "", false},
		{"nope", kftype.FallbackWaited, nil, "", false},
	} {
		got, ok := r.Next(c.kind, c.why, c.tried...)
		if got != c.want || ok != c.ok {
			t.Errorf("Next(%s, %s, %v) = %q, %v; want %q, %v", c.kind, c.why, c.tried, got, ok, c.want, c.ok)
		}
	}
	if after, ok := r.After("chat"); !ok || after != 7e9 {
		t.Errorf("After(chat) = %s, %v", after, ok)
	}
	if _, ok := r.After("east"); ok {
		t.Error("east has no fallback")
	}
	var none *fallback.Router
	if _, ok := none.Next("chat", kftype.FallbackWaited); ok || len(none.Counts()) != 0 {
		t.Error("a nil Router has no fallbacks")
	}
}

// Moved counts in the metrics and in Counts, by kind, fallback kind and
// reason.
func TestMoved(t *testing.T) {
	m := metrics.New()
	r := router(t, m)
	r.Moved("chat", "east", kftype.FallbackFailing)
	r.Moved("chat", "east", kftype.FallbackFailing)
	r.Moved("chat", "west", kftype.FallbackWaited)
	want := []kftype.FallbackCount{
		{Kind: "chat", To: "east", Why: kftype.FallbackFailing, Items: 2},
		{Kind: "chat", To: "west", Why: kftype.FallbackWaited, Items: 1},
	}
	if got := r.Counts(); !reflect.DeepEqual(got, want) {
		t.Errorf("Counts: got %+v, want %+v", got, want)
	}
	if got := counted(t, m, "chat", "east", kftype.FallbackFailing); got != 2 {
		t.Errorf("keyfleet_fallbacks_total{chat,east,failing} = %v, want 2", got)
	}
}

// counted is keyfleet_fallbacks_total of labels, as the registry gathers it.
func counted(t *testing.T, m *metrics.Metrics, labels ...string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "keyfleet_fallbacks_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var got []string
			for _, l := range mt.GetLabel() {
				got = append(got, l.GetValue())
			}
			if reflect.DeepEqual(got, labels) {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}
