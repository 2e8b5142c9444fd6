package queue

import (
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/check"
)

// MaxKindNameLen bounds a job kind's name.
const MaxKindNameLen = 64

// CheckKindName reports whether name can name a job kind (the config
// file's jobs.kinds.<name>): it is a token of its items' subjects
// (<prefix>.b.<batch>.<kind>[.<scope>]), an entry of a batch record's
// kinds (stored comma separated) and a header value, so it is 1 to
// MaxKindNameLen ASCII letters, digits, '_' or '-'. Whether a kind of
// that name is configured is CheckKind's question, not this one's.
func CheckKindName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a kind's name is empty")
	case len(name) > MaxKindNameLen:
		return fmt.Errorf("a kind's name is at most %d bytes, got %d", MaxKindNameLen, len(name))
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}); i >= 0 {
		return fmt.Errorf("%s: a kind's name holds only letters, digits, '_' and '-' (it is a subject token)", check.Quote(name))
	}
	return nil
}
