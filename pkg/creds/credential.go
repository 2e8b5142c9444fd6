package creds

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Credential defines one credential of the pool. It holds no secret.
type Credential struct {
	// ID names the credential; unique in the pool, at most 200 printable
	// characters without spaces.
	ID string
	// MaxConcurrent is how many leases may be held at once; at least 1.
	MaxConcurrent int
	// Rate optionally limits starts: "N/PERIOD" as ratelimit.ParseLimit
	// reads it ("60/m", "5/30s"). Empty: no rate limit.
	Rate string
}

func validID(id string) error {
	switch {
	case id == "":
		return errors.New("is empty")
	case len(id) > 200:
		return fmt.Errorf("is %d bytes long, at most 200", len(id))
	case strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%q holds a space or an unprintable character", id)
	}
	return nil
}

// parseDefs validates definitions; every problem is reported, each naming
// its field.
func parseDefs(defs []Credential) ([]ratelimit.Limit, error) {
	var errs []error
	seen := make(map[string]int, len(defs))
	limits := make([]ratelimit.Limit, len(defs))
	for i, d := range defs {
		if err := validID(d.ID); err != nil {
			errs = append(errs, &DefinitionError{i, "id", err.Error()})
		} else if j, dup := seen[d.ID]; dup {
			errs = append(errs, &DefinitionError{i, "id", fmt.Sprintf("%q is used twice (also credentials[%d])", d.ID, j)})
		} else {
			seen[d.ID] = i
		}
		if d.MaxConcurrent < 1 {
			errs = append(errs, &DefinitionError{i, "max_concurrent", fmt.Sprintf("must be at least 1, got %d", d.MaxConcurrent)})
		}
		if d.Rate != "" {
			l, err := ratelimit.ParseLimit(d.Rate)
			if err != nil {
				errs = append(errs, &DefinitionError{i, "rate", err.Error()})
			}
			limits[i] = l
		}
	}
	if len(defs) == 0 {
		errs = append(errs, fmt.Errorf("%w: no credentials given", ErrInvalid))
	}
	return limits, errors.Join(errs...)
}
