package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// How batch list and batch show print batchview's rows as text.

// printBatches prints the batches as a table.
func printBatches(w io.Writer, bs []batchview.Batch, now time.Time) {
	if len(bs) == 0 {
		fmt.Fprintln(w, "No batches.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tKIND\tPRIORITY\tWEIGHT\tSTATE\tDONE\tSUCCEEDED\tFAILED\tCANCELLED\tRATE\tETA\tLAST CHANGE")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n",
			termsafe.String(b.ID), termsafe.String(b.Kind), b.Priority, b.Weight, b.State, progress(b),
			b.Succeeded, b.Failed, b.Cancelled, rateText(b.Rate), etaText(b), lastChange(b, now))
	}
	_ = tw.Flush()
}

// printBatch prints one batch.
func printBatch(w io.Writer, b batchview.Batch, now time.Time) {
	fmt.Fprintf(w, "Batch %s\n", termsafe.String(b.ID))
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "  Kind:\t%s\n", termsafe.String(b.Kind))
	if len(b.Scopes) > 0 {
		fmt.Fprintf(tw, "  Scopes:\t%s\n", termsafe.String(strings.Join(b.Scopes, ", ")))
	}
	fmt.Fprintf(tw, "  Priority:\t%d (1 first .. 5 last)\n", b.Priority)
	fmt.Fprintf(tw, "  Weight:\t%d\n", b.Weight)
	state := b.State
	if b.State == batchview.StatePaused && b.PausedReason != "" {
		state += " (" + b.PausedReason + ")"
	}
	fmt.Fprintf(tw, "  State:\t%s\n", state)
	fmt.Fprintf(tw, "  Done:\t%s: %d succeeded, %d failed, %d cancelled\n", progress(b), b.Succeeded, b.Failed, b.Cancelled)
	if b.Tenant != "" {
		fmt.Fprintf(tw, "  Tenant:\t%s\n", termsafe.String(b.Tenant))
	}
	switch {
	case b.Budget != nil:
		fmt.Fprintf(tw, "  Spent:\t%s of a budget of %s\n", b.Spent, *b.Budget)
	case b.Spent > 0:
		fmt.Fprintf(tw, "  Spent:\t%s (no budget)\n", b.Spent)
	}
	if b.Deadline != nil {
		fmt.Fprintf(tw, "  Deadline:\t%s (%s; through the provider's Batch API)\n", b.Deadline.Local().Format(time.DateTime), until(now, *b.Deadline))
	}
	fmt.Fprintf(tw, "  Rate:\t%s, ETA %s\n", rateText(b.Rate), etaText(b))
	if b.EnqueuedAt != nil {
		fmt.Fprintf(tw, "  Enqueued:\t%s (%s)\n", b.EnqueuedAt.Local().Format(time.DateTime), ago(now, *b.EnqueuedAt))
	}
	if b.LastResultAt != nil {
		fmt.Fprintf(tw, "  Last result:\t%s (%s)\n", b.LastResultAt.Local().Format(time.DateTime), ago(now, *b.LastResultAt))
	}
	_ = tw.Flush()
	printProviderBatches(w, b.ProviderBatches)
	printFallbacks(w, "  Fallbacks (items that ran on a fallback kind):\n", b.Fallbacks)
	if len(b.History) == 0 {
		fmt.Fprintln(w, "  History: no pause, resume or cancel")
		return
	}
	fmt.Fprintln(w, "  History:")
	for _, e := range b.History {
		why := ""
		if e.Reason != "" {
			why = " (" + termsafe.String(e.Reason) + ")"
		}
		fmt.Fprintf(w, "    %s  %-6s by %s%s\n", e.At.Local().Format(time.DateTime), termsafe.String(e.Action), termsafe.String(e.By), why)
	}
}

// printProviderBatches lists a batch's provider batches (Batch API), one
// line each: the provider's ID (keyfleet's record before it exists), the
// key, its status, its counts, and what keyfleet did with it (items sent
// to real time, requests spent twice, cancelled for what).
func printProviderBatches(w io.Writer, pbs []batchview.ProviderBatch) {
	if len(pbs) == 0 {
		return
	}
	fmt.Fprintln(w, "  Provider batches:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    ID\tKEY\tSTATUS\tCOMPLETED\tFAILED\tREAL TIME\tSPENT TWICE\tCANCELLED")
	for _, p := range pbs {
		id := p.ID
		if id == "" {
			id = "(" + p.Record + ")"
		}
		cancel := "-"
		if p.Cancel != "" {
			cancel = "for the " + p.Cancel
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\n", termsafe.String(id), termsafe.String(p.Credential), termsafe.String(p.Status),
			p.Completed, p.Total, p.Failed, p.RealTime, p.SpentTwice, termsafe.String(cancel))
	}
	_ = tw.Flush()
}

// until is how far off t is from now, "in 3h0m0s", or "passed".
func until(now, t time.Time) string {
	if !t.After(now) {
		return "passed"
	}
	return "in " + t.Sub(now).Round(time.Second).String()
}

// progress is "done/total" ("done/?" when the total is not known).
func progress(b batchview.Batch) string {
	if !b.TotalKnown {
		return fmt.Sprintf("%d/?", b.Done)
	}
	return fmt.Sprintf("%d/%d", b.Done, b.Total)
}

func rateText(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/s", r)
}

func etaText(b batchview.Batch) string {
	if b.ETASeconds == nil {
		return "-"
	}
	return (time.Duration(*b.ETASeconds * float64(time.Second))).Round(time.Second).String()
}

// lastChange is the batch's latest pause, resume or cancel: "cancel by
// alice@host 3m ago", or "-".
func lastChange(b batchview.Batch, now time.Time) string {
	if b.LastChange == nil {
		return "-"
	}
	e := b.LastChange
	return strings.Join([]string{termsafe.String(e.Action), "by", termsafe.String(e.By), ago(now, e.At)}, " ")
}
