package jsonl

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrBadScope: the item's scope field is not a string, or
// Options.CheckScope refused it.
var ErrBadScope = errors.New("jsonl: bad scope")

// Scope returns an item's scope (pool.scope: the model it asks for, say):
// the string in its top-level field (ok), or none when the field is
// missing or null. Any other value is an ErrBadScope naming the field.
func Scope(obj []byte, field string) (scope string, ok bool, err error) {
	raw, found := Field(obj, field)
	if !found || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] != '"' {
		return "", false, fmt.Errorf("%w: field %q is %s, want a string", ErrBadScope, field, describe(raw[0]))
	}
	if err := json.Unmarshal(raw, &scope); err != nil {
		return "", false, fmt.Errorf("%w: field %q does not decode: %v", ErrBadScope, field, err)
	}
	return scope, true, nil
}
