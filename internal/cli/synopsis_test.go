package cli

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// readmeSynopsis is the fenced block of README.md between these markers:
// the command lines in full.
const (
	synopsisStart = "<!-- cli-synopsis -->"
	synopsisEnd   = "<!-- /cli-synopsis -->"
)

// pendingFlags are flags and commands the README's synopsis (the pinned
// user interface) names that are being added in another change; each is
// allowed to be missing from the commands until it exists. Once it
// exists, the test asks for its entry here to go.
var pendingFlags = map[string]bool{}

// synopsis parses the block: each line (an indented line continues the one
// before) is a binary, a command path, and either flags or alternatives
// separated by " | ", each a subcommand with its flags. It returns the
// flags named for each command path ("producer batch cancel").
func synopsis(t *testing.T, block string, roots map[string]*cobra.Command) map[string][]string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		switch {
		case strings.TrimSpace(l) == "":
		case (l[0] == ' ' || l[0] == '\t') && len(lines) > 0:
			lines[len(lines)-1] += " " + strings.TrimSpace(l)
		default:
			lines = append(lines, l)
		}
	}
	flagRE := regexp.MustCompile(`(?:^|[\[\s])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b`)
	out := map[string][]string{}
	add := func(path string, text string) {
		if _, ok := out[path]; !ok {
			out[path] = []string{}
		}
		for _, m := range flagRE.FindAllStringSubmatch(text, -1) {
			out[path] = append(out[path], m[1])
		}
	}
	// words returns the leading command words of text that name
	// subcommands of cmd, the command they name, and the rest.
	descend := func(cmd *cobra.Command, path, text string) (*cobra.Command, string, string) {
		for {
			text = strings.TrimSpace(text)
			word, rest, _ := strings.Cut(text, " ")
			var next *cobra.Command
			for _, c := range cmd.Commands() {
				if c.Name() == word {
					next = c
				}
			}
			if next == nil {
				if word != "" && regexp.MustCompile(`^[a-z]+$`).MatchString(word) && cmd.HasSubCommands() {
					// A subcommand the code does not have: kept by its
					// name so that the test reports it.
					return nil, path + " " + word, rest
				}
				return cmd, path, text
			}
			cmd, path, text = next, path+" "+word, rest
		}
	}
	for _, l := range lines {
		bin, rest, _ := strings.Cut(l, " ")
		root := roots[bin]
		if root == nil {
			t.Fatalf("README synopsis: line %q names no binary (%v)", l, slices.Sorted(maps.Keys(roots)))
		}
		// The first alternative names the whole path; the others are
		// subcommands of the same command as its last.
		alts := strings.Split(rest, " | ")
		cmd, path, text := descend(root, bin, alts[0])
		add(path, text)
		if cmd == nil || len(alts) == 1 {
			continue
		}
		parent, ppath := cmd.Parent(), path[:strings.LastIndexByte(path, ' ')]
		for _, alt := range alts[1:] {
			_, p, r := descend(parent, ppath, alt)
			add(p, r)
		}
	}
	return out
}

// The README's CLI synopsis and the commands agree: every command and
// flag it names exists (or is pending, above), and every command and
// flag the code has is named there, so the two cannot drift apart. Each
// runnable command is checked with its own flags; the persistent flags of
// each binary are named once, on its own line.
func TestReadmeSynopsisMatchesCommands(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	i, j := strings.Index(readme, synopsisStart), strings.Index(readme, synopsisEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %s … %s block", synopsisStart, synopsisEnd)
	}
	block := readme[i+len(synopsisStart) : j]
	fence := regexp.MustCompile("(?s)^\\s*```[a-z]*\n(.*)\n```\\s*$").FindStringSubmatch(block)
	if fence == nil {
		t.Fatalf("the synopsis is not one fenced block:\n%s", block)
	}
	roots := map[string]*cobra.Command{
		"producer": newProducerCmd(strings.NewReader(""), io.Discard, io.Discard),
		"worker":   newWorkerCmd(io.Discard, io.Discard),
	}
	named := synopsis(t, fence[1], roots)

	// Every command of the code, and its flags.
	var walk func(path string, c *cobra.Command)
	seen := map[string]bool{}
	walk = func(path string, c *cobra.Command) {
		seen[path] = true
		flags, ok := named[path]
		switch {
		case !ok && c.Runnable():
			t.Errorf("README synopsis lacks the command %q", path)
		case ok:
			var own []*pflag.Flag
			if c.HasParent() {
				c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { own = append(own, f) })
			} else {
				c.Flags().VisitAll(func(f *pflag.Flag) { own = append(own, f) })
				c.PersistentFlags().VisitAll(func(f *pflag.Flag) { own = append(own, f) })
			}
			for _, f := range own {
				if f.Hidden || f.Name == "help" || f.Name == "version" {
					continue
				}
				if !slices.Contains(flags, "--"+f.Name) && !(f.Shorthand != "" && slices.Contains(flags, "-"+f.Shorthand)) {
					t.Errorf("README synopsis: %s lacks --%s", path, f.Name)
				}
			}
			for _, fl := range flags {
				name := strings.TrimLeft(fl, "-")
				var f *pflag.Flag
				if len(fl) == 2 {
					f = c.Flags().ShorthandLookup(name)
				} else {
					for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags(), c.InheritedFlags()} {
						if f == nil {
							f = fs.Lookup(name)
						}
					}
				}
				switch {
				case f == nil && pendingFlags[path+" "+fl]:
				case f == nil:
					t.Errorf("README synopsis: %s has no flag %s", path, fl)
				case pendingFlags[path+" "+fl]:
					t.Errorf("%s %s exists now: remove it from pendingFlags", path, fl)
				}
			}
		}
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(path+" "+sub.Name(), sub)
		}
	}
	for name, root := range roots {
		walk(name, root)
	}
	for path := range named {
		switch {
		case !seen[path] && !pendingFlags[path]:
			t.Errorf("README synopsis names %q, which is no command", path)
		case seen[path] && pendingFlags[path]:
			t.Errorf("%q exists now: remove it from pendingFlags", path)
		}
	}
}

// The parser itself: alternatives, continuation lines, short flags, flag
// values with '|' inside brackets, unknown commands and flags.
func TestSynopsisParser(t *testing.T) {
	roots := map[string]*cobra.Command{"producer": newProducerCmd(strings.NewReader(""), io.Discard, io.Discard)}
	got := synopsis(t, `producer batch   list [--json] | show ID [--json]
                 | cancel ID [--yes]
producer results --batch ID [--format a|b|c] [-o FILE]
producer nope [--x]
producer dlq bogus [--y]`, roots)
	want := map[string][]string{
		"producer batch list":   {"--json"},
		"producer batch show":   {"--json"},
		"producer batch cancel": {"--yes"},
		"producer results":      {"--batch", "--format", "-o"},
		"producer nope":         {"--x"}, // no command: the test above reports it
		"producer dlq bogus":    {"--y"},
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: want %q, got %q", k, v, got[k])
		}
	}
}
