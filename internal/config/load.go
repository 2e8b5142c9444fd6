package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Load returns the validated configuration.
//
// The file is path; if path is "", the file named by getenv(EnvConfig); if
// that is "" too, Default() (Source DefaultsSource). A file that is empty or
// holds only comments also gives the defaults, with Source set to its path.
// Then non-empty getenv(EnvNATSURL) and getenv(EnvRedisURL) replace nats.url
// and redis.url; an error about them says so. Last, Validate.
//
// getenv is os.Getenv when nil. Callers apply their flags to the result and
// call Validate again. Every error names the file, and the line of the key
// at fault when the value is the file's (not an environment variable's);
// problems are reported all at once (errors.Join), one line each. A file
// that cannot be read gives
// an error that wraps the cause (errors.Is(err, fs.ErrNotExist) works).
func Load(path string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	from := ""
	if path == "" {
		path, from = getenv(EnvConfig), EnvConfig
	}
	c := Default()
	var lines keyLines
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
		if c, lines, err = decode(path, data); err != nil {
			return nil, err
		}
	}
	notes := map[string]string{}
	if u := strings.TrimSpace(getenv(EnvNATSURL)); u != "" {
		c.NATS.URL, notes["nats.url"] = u, EnvNATSURL
	}
	if u := strings.TrimSpace(getenv(EnvRedisURL)); u != "" {
		c.Redis.URL, notes["redis.url"] = u, EnvRedisURL
	}
	if err := fromList(c.validate(), lines, notes).err(c.Source, notes); err != nil {
		return nil, err
	}
	return c, nil
}
