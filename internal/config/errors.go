package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// problem is one thing wrong with a configuration. It becomes one error line:
//
//	config: <source>: [line <line>: ][<key>: ]<msg>
type problem struct {
	line int    // 1-based line in the file; 0 when unknown
	key  string // key path such as "pool.credentials[0].rate"; "" when msg names it
	msg  string
}

// problems collects problems in the order they are found.
type problems []problem

func (ps *problems) add(key, format string, args ...any) {
	*ps = append(*ps, problem{key: key, msg: fmt.Sprintf(format, args...)})
}

func (ps *problems) addLine(line int, key, format string, args ...any) {
	*ps = append(*ps, problem{line: line, key: key, msg: fmt.Sprintf(format, args...)})
}

// err joins the problems into one error, one line each, naming source. notes
// add "(from <note>)" after a key, to say where its value came from (an
// environment variable). It returns nil when there is no problem.
func (ps problems) err(source string, notes map[string]string) error {
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		var b strings.Builder
		b.WriteString("config: ")
		if source != "" {
			b.WriteString(source)
			b.WriteString(": ")
		}
		if p.line > 0 {
			fmt.Fprintf(&b, "line %d: ", p.line)
		}
		if p.key != "" {
			b.WriteString(p.key)
			if n := notes[p.key]; n != "" {
				b.WriteString(" (from ")
				b.WriteString(n)
				b.WriteString(")")
			}
			b.WriteString(": ")
		}
		b.WriteString(p.msg)
		errs[i] = errors.New(b.String())
	}
	return errors.Join(errs...)
}

// fromList turns the problems validation found into problems of the file,
// each on the line of its key (or of its nearest ancestor the file sets).
// lines is nil when no line is known; a key with a note (its value came
// from elsewhere) gets no line.
func fromList(l check.List, lines keyLines, notes map[string]string) problems {
	ps := make(problems, len(l))
	for i, p := range l {
		ps[i] = problem{key: p.Key, msg: p.Msg}
		if notes[p.Key] == "" {
			ps[i].line = lines.find(p.Key)
		}
	}
	return ps
}

// quote renders a value from the file for a message (check.Quote).
func quote(s string) string { return check.Quote(s) }

// redactURL hides the user:password@ or token@ part of a URL (or a list
// of URLs) so that it can appear in a message.
func redactURL(s string) string { return secret.RedactURL(s) }
