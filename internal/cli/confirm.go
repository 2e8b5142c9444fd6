package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// A command that changes the whole fleet at once (dlq replay of every
// batch, batch cancel, creds remove) asks before it acts when its
// standard input is a terminal: an operator typing a command gets one
// chance to read what it is about to do. --yes answers for them; without
// a terminal (a script, a pipe, CI) nothing is asked and the command acts,
// as it always did.

// yesFlag registers --yes on a command that may ask.
func yesFlag(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do not ask for confirmation on a terminal")
}

// errNotConfirmed: the question was not answered yes; nothing was done.
var errNotConfirmed = errors.New("not confirmed")

// confirm asks question() on standard error when standard input is a
// terminal and yes is false, and reads the answer: "y" or "yes" (any
// case) goes on; anything else, or the end of the input, is a refusal,
// returned as an error with exit code 1 saying that nothing was done
// (nothing names what was not). Without a terminal, or with yes, it asks
// nothing and returns nil.
func (p *producer) confirm(yes bool, question func() string, nothing string) error {
	if yes || !isTerminal(p.stdin) {
		return nil
	}
	fmt.Fprintf(p.stderr, "%s [y/N] ", termsafe.String(question()))
	line, err := bufio.NewReader(p.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return exitcode.With(exitcode.Failed, fmt.Errorf("%w (%v): %s", errNotConfirmed, err, nothing))
	}
	if errors.Is(err, io.EOF) {
		fmt.Fprintln(p.stderr)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return exitcode.With(exitcode.Failed, fmt.Errorf("%w: %s (--yes skips the question)", errNotConfirmed, nothing))
}
