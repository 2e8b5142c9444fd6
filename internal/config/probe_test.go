package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
)

// pool.probe_interval needs a probe of a configured kind; the probes'
// own keys are checked by their kinds.
func TestProbeSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		want []string // error lines; none: it loads
		// kinds with a probe, when it loads
		probes []string
	}{
		{name: "off by default", yaml: "jobs:\n  http: {url: 'https://a.example/x', probe_url: 'https://a.example/v1/models'}\n", probes: []string{"http"}},
		{
			name:   "http probe",
			yaml:   "pool:\n  probe_interval: 30s\njobs:\n  http: {url: 'https://a.example/x', probe_url: 'https://a.example/v1/models'}\n",
			probes: []string{"http"},
		},
		{
			name:   "exec probe",
			yaml:   "pool:\n  probe_interval: 1s\njobs:\n  exec: {command: [./run.sh], probe_command: [./check-key.sh, --quiet]}\n  http: {url: 'https://a.example/x'}\n",
			probes: []string{"exec"},
		},
		{
			name: "interval without a probe",
			yaml: "pool:\n  probe_interval: 1m\njobs:\n  http: {url: 'https://a.example/x'}\n",
			want: []string{`config: FILE: line 2: pool.probe_interval: is set, but no job kind has a probe: ` +
				`set jobs.http.probe_url or jobs.exec.probe_command (or 0: no probes)`},
		},
		{
			name: "interval too short",
			yaml: "pool:\n  probe_interval: 500ms\njobs:\n  exec: {command: [./run.sh], probe_command: [./check-key.sh]}\n",
			want: []string{`config: FILE: line 2: pool.probe_interval: must be at least 1s, got 500ms`},
		},
		{
			name: "probe url not absolute",
			yaml: "jobs:\n  http:\n    url: 'https://a.example/x'\n    probe_url: /v1/models\n",
			want: []string{`config: FILE: line 4: jobs.http.probe_url: "/v1/models" is not an absolute URL; want http://host/... or https://host/...`},
		},
		{
			name: "probe command blank",
			yaml: "jobs:\n  exec:\n    command: [./run.sh]\n    probe_command: ['']\n",
			want: []string{`config: FILE: line 4: jobs.exec.probe_command[0]: must name the program to run`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "kf.yaml", tt.yaml)
			c, err := config.Load(path, env(nil))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for k := range c.Jobs.ProbeSections() {
					got = append(got, k)
				}
				slices.Sort(got)
				if !slices.Equal(got, tt.probes) {
					t.Fatalf("kinds with a probe: want %v, got %v", tt.probes, got)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error, got none; config %+v", c)
			}
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE", path)
			if got := err.Error(); got != want {
				t.Fatalf("error mismatch\nwant:\n%s\ngot:\n%s", want, got)
			}
		})
	}
	if d := config.Default().Pool.ProbeInterval; d != 0 {
		t.Errorf("pool.probe_interval: want the default 0 (off), got %s", d)
	}
}
