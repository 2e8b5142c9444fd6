package jobs

import (
	"slices"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/jobguard"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// Kind is one job kind. Every kind is registered once, in kinds below, and
// everything that handles kinds looks it up there: the config file's
// jobs.<name> sections and their checks, the queue's subjects, the
// worker's handlers, and the producer's --kind.
//
// Adding a kind: its handler and settings type in this package, its entry
// in kinds, a field for its section in config.Jobs (yaml key Name; a test
// checks the two agree), and the section in config/reference.yaml.
type Kind struct {
	// Name is the kind's name: Item.Kind, the last token of its items'
	// subject (<prefix>.<name>), and the key of its section under jobs: in
	// the config file.
	Name string
	// Section returns a new settings section of the kind with its defaults
	// filled in; nil for a kind that takes no settings. A kind with a
	// section runs only where its section is configured; one without runs
	// everywhere.
	Section func() Section
	// New returns the kind's handler for its section (nil when the kind
	// takes none) and the settings every kind gets.
	New func(section Section, common Common) (Handler, error)
}

// Section is a kind's settings: the config file's section jobs.<name>.
type Section interface {
	// Check reports every problem of the settings, each keyed by its key
	// in the section.
	Check() check.List
}

// Common are the settings every handler gets from the worker.
type Common struct {
	// MaxOutput bounds a job's output (jobs.max_output); 0:
	// MaxOutputDefault.
	MaxOutput int
	// Scrubber removes every configured secret from what a job outputs.
	Scrubber *secret.Scrubber
	// ScrubEnv names variables of the worker's environment that hold
	// secrets: a job must not see them.
	ScrubEnv []string
	// Guard kills the processes of jobs when the worker dies (nil: none).
	Guard *jobguard.Guard
	// Notes receives what persistent exec handlers have for the log
	// (ExecConfig.Notes). Nil: none.
	Notes func(HandlerNote)
}

// The kinds' names.
const (
	KindExec  = "exec"
	KindHTTP  = "http"
	KindSleep = "sleep"
)

// DefaultKind is the kind producer enqueue takes when the configuration
// does not decide.
const DefaultKind = KindExec

var kinds = []Kind{
	{
		Name:    KindExec,
		Section: func() Section { c := ExecConfig{}.WithDefaults(); return &c },
		New: func(s Section, common Common) (Handler, error) {
			cfg := *s.(*ExecConfig)
			cfg.MaxOutput, cfg.Scrubber, cfg.ScrubEnv, cfg.Guard = common.MaxOutput, common.Scrubber, common.ScrubEnv, common.Guard
			cfg.Notes = common.Notes
			return NewExec(cfg)
		},
	},
	{
		Name:    KindHTTP,
		Section: func() Section { c := HTTPConfig{}.WithDefaults(); return &c },
		New: func(s Section, common Common) (Handler, error) {
			cfg := *s.(*HTTPConfig)
			cfg.MaxOutput, cfg.Scrubber = common.MaxOutput, common.Scrubber
			return NewHTTP(cfg)
		},
	},
	{
		Name: KindSleep,
		New:  func(Section, Common) (Handler, error) { return NewSleep(), nil },
	},
}

// Kinds returns every kind, in a fixed order.
func Kinds() []Kind { return slices.Clone(kinds) }

// Names returns the names of every kind, in the order of Kinds.
func Names() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return names
}

// Lookup returns the kind called name.
func Lookup(name string) (Kind, bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.Name == name })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}
