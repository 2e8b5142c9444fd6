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
	// ID names the credential; see ValidID.
	ID string
	// MaxConcurrent is how many leases may be held at once; at least 1.
	MaxConcurrent int
	// Rate optionally limits starts: "N/PERIOD" as ratelimit.ParseLimit
	// reads it ("60/m", "5/30s"), short for a LimitWindow in Limits.
	// Empty: none.
	Rate string
	// Limits are the credential's limits (see Limit); a start needs room
	// in every one that applies to it (unscoped, or of its scope).
	Limits []Limit
	// Groups are the key groups the credential belongs to (a kind's
	// `credentials` names them); shown in stats. Each is a ValidID.
	Groups []string
	// Account is the account the credential belongs to (see Account; ""
	// none: the credential is an account of its own). Define needs the
	// account among its definitions.
	Account string
}

// MaxIDLength bounds a credential ID and a pool name.
const MaxIDLength = 128

// MaxConcurrentDefault is the concurrency limit of a credential whose
// definition gives none (as in the seeds: one job at a time).
const MaxConcurrentDefault = 1

// ValidName reports whether name can name a pool: 1 to MaxIDLength
// letters, digits, '_', '.' or '-' (it is the hash tag of every key).
func ValidName(name string) error { return validToken(name, "_.-") }

// ValidID reports whether id can name a credential: 1 to MaxIDLength
// characters among letters, digits, '_', '.', '-', ':' and '@' (it appears
// in Redis keys, NATS headers, metrics labels and file names).
func ValidID(id string) error { return validToken(id, "_.-:@") }

// validToken checks s is 1 to MaxIDLength ASCII letters, digits or
// characters of extra.
func validToken(s, extra string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxIDLength:
		return fmt.Errorf("is %d bytes long, at most %d", len(s), MaxIDLength)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(extra, r)))
	}); i >= 0 {
		return fmt.Errorf("%q holds %q: use letters, digits or one of %q", s, s[i:i+1], extra)
	}
	return nil
}

// limits is every limit of the definition: Rate's and Limits.
func (d Credential) limits() ([]Limit, error) {
	var out []Limit
	if d.Rate != "" {
		l, err := ratelimit.ParseLimit(d.Rate)
		if err != nil {
			return nil, err
		}
		out = append(out, RateLimit(l))
	}
	for _, l := range d.Limits {
		if err := l.Validate(); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// parseDefs validates definitions; every problem is reported, each naming
// its field. It returns the encoded limits of each.
func parseDefs(defs []Credential) ([]string, error) {
	var errs []error
	seen := make(map[string]int, len(defs))
	enc := make([]string, len(defs))
	for i, d := range defs {
		if err := ValidID(d.ID); err != nil {
			errs = append(errs, &DefinitionError{Index: i, Field: "id", Problem: err.Error()})
		} else if j, dup := seen[d.ID]; dup {
			errs = append(errs, &DefinitionError{Index: i, Field: "id", Problem: fmt.Sprintf("%q is used twice (also credentials[%d])", d.ID, j)})
		} else {
			seen[d.ID] = i
		}
		if d.MaxConcurrent < 1 {
			errs = append(errs, &DefinitionError{Index: i, Field: "max_concurrent", Problem: fmt.Sprintf("must be at least 1, got %d", d.MaxConcurrent)})
		}
		for j, g := range d.Groups {
			if err := ValidID(g); err != nil {
				errs = append(errs, &DefinitionError{Index: i, Field: fmt.Sprintf("groups[%d]", j), Problem: err.Error()})
			}
		}
		ls, err := d.limits()
		if err != nil {
			field := "limits"
			if errors.Is(err, ratelimit.ErrBadRate) {
				field = "rate"
			}
			errs = append(errs, &DefinitionError{Index: i, Field: field, Problem: err.Error()})
		}
		enc[i] = encodeLimits(ls)
	}
	if len(defs) == 0 {
		errs = append(errs, fmt.Errorf("%w: no credentials given", ErrInvalid))
	}
	return enc, errors.Join(errs...)
}
