package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// printFallbacks prints fallback counts under title, if there are any:
// what `status` and `batch show` say of items that ran on a fallback kind.
func printFallbacks(w io.Writer, title string, fs []kftype.FallbackCount) {
	if len(fs) == 0 {
		return
	}
	fmt.Fprint(w, title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tRAN ON\tWHY\tITEMS")
	for _, f := range fs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", termsafe.String(f.Kind), termsafe.String(f.To), termsafe.String(f.Why), f.Items)
	}
	_ = tw.Flush()
}
