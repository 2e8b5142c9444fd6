package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/keyfleet/keyfleet/internal/check"
)

// Where a configuration is found when no file is named (Find).
const (
	// LocalFile is looked for in the working directory.
	LocalFile = "keyfleet.yaml"
	// UserFile is looked for under $XDG_CONFIG_HOME, else ~/.config.
	UserFile = "keyfleet/config.yaml"
	// EnvXDGConfigHome and EnvHome locate UserFile.
	EnvXDGConfigHome = "XDG_CONFIG_HOME"
	EnvHome          = "HOME"
)

// DiscoveryHelp says in which order the configuration file is found, on
// one line, for the commands' help.
const DiscoveryHelp = "--config FILE, else $" + EnvConfig + ", else ./" + LocalFile + ", else $" + EnvXDGConfigHome + "/" +
	UserFile + " (~/.config/" + UserFile + "), else built-in defaults for a local NATS and Redis"

// Find returns the configuration file Load reads: path when it is not "";
// else the file named by getenv(EnvConfig); else LocalFile in the working
// directory, if there is one; else UserFile under getenv(EnvXDGConfigHome)
// (an absolute path, as the XDG spec wants), else under
// getenv(EnvHome)/.config, if there is one; else "" (the built-in
// defaults). from says how the file was found, for messages: "" for path,
// EnvConfig, or the place it was looked for. A file found by looking is
// one that exists (a directory is not one); a named file is taken as
// named, and Load says if it cannot be read.
func Find(path string, getenv func(string) string) (file, from string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if path != "" {
		return path, ""
	}
	if p := getenv(EnvConfig); p != "" {
		return p, EnvConfig
	}
	if isFile(LocalFile) {
		return LocalFile, "the working directory"
	}
	dir := getenv(EnvXDGConfigHome)
	from = "$" + EnvXDGConfigHome
	if !filepath.IsAbs(dir) {
		dir, from = "", "~/.config"
		if home := getenv(EnvHome); filepath.IsAbs(home) {
			dir = filepath.Join(home, ".config")
		}
	}
	if dir != "" {
		if p := filepath.Join(dir, UserFile); isFile(p) {
			return p, from
		}
	}
	return "", ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Load returns the validated configuration: Read, then Validate.
//
// The file is the one Find finds; without one, Default() (Source
// DefaultsSource). A file that is empty or holds only comments also gives
// the defaults, with Source set to its path. Then non-empty
// getenv(EnvNATSURL) and getenv(EnvRedisURL) replace nats.url and
// redis.url; an error about them says so. Last, Validate.
//
// getenv is os.Getenv when nil. Callers apply their flags to the result and
// call Validate again (or use Read, Note and Loaded.Validate). Every error
// names the file, and the line of the key at fault when the value is the
// file's (not an environment variable's); problems are reported all at
// once (errors.Join), one line each. A file that cannot be read gives an
// error that wraps the cause (errors.Is(err, fs.ErrNotExist) works).
func Load(path string, getenv func(string) string) (*Config, error) {
	l, err := Read(path, getenv)
	if err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l.Config, nil
}

// Loaded is a configuration as Read reads it, not validated yet, with the
// line of every key its file sets: checks made after loading (`producer
// config check`, a worker's start) name the lines of their problems too.
type Loaded struct {
	// Config is the configuration: the file's, with the environment's
	// server URLs.
	Config *Config
	lines  keyLines
	notes  map[string]string // key -> where its value came from instead of the file
}

// Read reads the configuration as Load does (Find, then the file, then the
// environment's server URLs) without validating it. Its error is a file
// that cannot be read, or one that cannot be decoded: every problem, each
// with its line.
func Read(path string, getenv func(string) string) (*Loaded, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	path, from := Find(path, getenv)
	l := &Loaded{Config: Default(), notes: map[string]string{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // its path is the one named below
			}
			where := path
			if from != "" {
				where += " (from " + from + ")"
			}
			return nil, fmt.Errorf("config: %s: cannot read: %w", where, err)
		}
		if l.Config, l.lines, err = decode(path, data); err != nil {
			return nil, err
		}
	}
	if u := strings.TrimSpace(getenv(EnvNATSURL)); u != "" {
		l.Config.NATS.URL = u
		l.Note("nats.url", EnvNATSURL)
	}
	if u := strings.TrimSpace(getenv(EnvRedisURL)); u != "" {
		l.Config.Redis.URL = u
		l.Note("redis.url", EnvRedisURL)
	}
	return l, nil
}

// Note records that the value at key came from elsewhere than the file
// (an environment variable, a flag: via names it): its problems say so
// instead of naming a line.
func (l *Loaded) Note(key, via string) { l.notes[key] = via }

// Validate reports every problem of the configuration (Config.Validate),
// each on the line of its key.
func (l *Loaded) Validate() error { return l.Problems(l.Config.validate()) }

// Problems returns the problems a check of the configuration found (each
// keyed by its path from the file's root, such as
// "pool.credentials[1].secret_env") as Validate returns its own: one line
// each, naming the file and the line of the key (or of its nearest
// ancestor the file sets). Nil when the list is empty.
func (l *Loaded) Problems(list check.List) error {
	return fromList(list, l.lines, l.notes).err(l.Config.Source, l.notes)
}

// CheckSecrets reports every credential whose secret a worker could not
// read (what ResolveSecrets refuses), keyed by the path of its
// secret_env or secret_file, without keeping or quoting a secret. A
// credential that sets both or neither is Validate's to report.
func (c *Config) CheckSecrets(getenv func(string) string) check.List {
	if getenv == nil {
		getenv = os.Getenv
	}
	var ps check.List
	for i, cr := range c.Pool.Credentials {
		key := fmt.Sprintf("pool.credentials[%d]", i)
		switch {
		case cr.SecretEnv != "" && cr.SecretFile != "":
		case cr.SecretEnv != "":
			if strings.TrimSpace(getenv(cr.SecretEnv)) == "" {
				ps.Add(key+".secret_env", "credential %s: environment variable %s is not set or is empty", quote(cr.ID), cr.SecretEnv)
			}
		case cr.SecretFile != "":
			if _, msg := readSecretFile(cr.SecretFile); msg != "" {
				ps.Add(key+".secret_file", "credential %s: %s %s", quote(cr.ID), cr.SecretFile, msg)
			}
		}
	}
	return ps
}
