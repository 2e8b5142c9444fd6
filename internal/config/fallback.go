package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
)

// Fallback is where a named kind's items run when its own keys cannot
// serve them (jobs.kinds.<name>.fallback; docs/providers.md,
// "Fallbacks"): an item that cannot start on its kind's keys within
// After, or whose runs failed transiently twice in a row on its keys,
// runs on the first of Kinds that can take it, with the same request.
type Fallback struct {
	// Kinds are the kinds its items may move to, in order: configured
	// kinds whose requests read the same (FallbackFamily), none of them
	// the kind itself, and no cycle through their own fallbacks. An item
	// moves along its own kind's list only. Required.
	Kinds []string `yaml:"kinds"`
	// After is how long an item may wait for a key of its own kind
	// before it moves. Default FallbackAfterDefault (30s).
	After time.Duration `yaml:"after"`
}

// FallbackAfterDefault is the default of a kind's fallback.after.
const FallbackAfterDefault = 30 * time.Second

// WithDefaults fills the zero settings with their defaults; the decoder
// starts a kind's fallback section from it.
func (f Fallback) WithDefaults() Fallback {
	if f.After == 0 {
		f.After = FallbackAfterDefault
	}
	return f
}

// FallbackFamily names what the items of a configured kind are, for a
// fallback: a provider kind's requests are its provider's family's
// (provider.Family: openai for openai and openai-compatible, anthropic);
// a plain http kind's are "http" and an exec kind's "exec" (their items'
// JSON goes to the URL or to the command as it is, so they move only to a
// kind of their own sort); a kind that takes no settings (sleep) is its
// own. "" for a kind that is not configured. An item moves only between
// kinds of one family.
func (j Jobs) FallbackFamily(kind string) string {
	base, sec, ok := j.KindSection(kind)
	if !ok {
		return ""
	}
	if h, isHTTP := sec.(*HTTPJob); isHTTP && h != nil && h.Provider != "" {
		return provider.Family(h.Provider)
	}
	return base.Name
}

// familyText says what a family's items are, for a problem.
func familyText(f string) string {
	switch f {
	case provider.OpenAI:
		return "OpenAI requests (provider openai or openai-compatible)"
	case provider.Anthropic:
		return "Anthropic requests (provider anthropic)"
	case jobs.KindHTTP:
		return "plain http requests (http without a provider)"
	case jobs.KindExec:
		return "exec items"
	}
	return f + " items"
}

// FallbackOf returns a kind's fallback (nil: none).
func (j Jobs) FallbackOf(kind string) *Fallback {
	if k, ok := j.Kinds[kind]; ok {
		return k.Fallback
	}
	return nil
}

// checkFallbacks checks each named kind's fallback: kinds listed, each a
// configured kind of the same family, once, not the kind itself, no
// cycle of fallbacks; a positive after.
func (c *Config) checkFallbacks(ps *check.List) {
	j := c.Jobs
	for _, name := range j.KindNames() {
		f := j.Kinds[name].Fallback
		if f == nil {
			continue
		}
		key := "jobs.kinds." + name + ".fallback"
		ps.Positive(key+".after", f.After)
		if len(f.Kinds) == 0 {
			ps.Add(key+".kinds", "lists no kind: name the kinds its items may run on instead, in order")
		}
		family := j.FallbackFamily(name)
		for i, to := range f.Kinds {
			k := fmt.Sprintf("%s.kinds[%d]", key, i)
			toFamily := j.FallbackFamily(to)
			switch {
			case to == name:
				ps.Add(k, "%s is the kind itself: fallbacks form a cycle (%s -> %s)", check.Quote(to), name, name)
			case slices.Index(f.Kinds, to) < i:
				ps.Add(k, "%s is listed twice", check.Quote(to))
			case toFamily == "":
				ps.Add(k, "%s is not a configured kind (jobs.kinds: %s)", check.Quote(to), strings.Join(j.KindNames(), ", "))
			case family != "" && toFamily != family:
				ps.Add(k, "%s reads %s, but %s's items are %s: a fallback kind must read the same request",
					check.Quote(to), familyText(toFamily), name, familyText(family))
			default:
				if cycle := j.fallbackCycle(name, to); cycle != nil {
					ps.Add(k, "fallbacks form a cycle: %s", strings.Join(cycle, " -> "))
				}
			}
		}
	}
}

// fallbackCycle returns a path of fallbacks from `to` back to `from`, as
// from -> to -> ... -> from, or nil when there is none.
func (j Jobs) fallbackCycle(from, to string) []string {
	seen := map[string]bool{}
	var walk func(at string, path []string) []string
	walk = func(at string, path []string) []string {
		path = append(path, at)
		if at == from {
			return path
		}
		if seen[at] {
			return nil
		}
		seen[at] = true
		if f := j.FallbackOf(at); f != nil {
			for _, next := range f.Kinds {
				if p := walk(next, slices.Clone(path)); p != nil {
					return p
				}
			}
		}
		return nil
	}
	return walk(to, []string{from})
}
