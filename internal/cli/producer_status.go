package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// statusReport is the object `producer status --json` prints: a stable
// schema, every key always present (times are RFC 3339 strings, or null
// when there is none; lists are [] when empty).
//
//	{
//	  "at":       time the status was read (the producer's clock)
//	  "stream":   {"name", "messages", "bytes"}  the work stream: items waiting or running
//	  "consumer": {"name",
//	               "pending"        items not yet delivered to a worker
//	               "ack_pending"    items delivered and not yet settled (running or waiting for a credential)
//	               "redelivered"    of those, delivered more than once
//	               "waiting_pulls"  pull requests of idle worker slots
//	               "last_active"}   the consumer's last delivery (null: never)
//	  "dead_letters": dead-letter records (`producer dlq list`)
//	  "results":      result records kept (`producer results`)
//	  "workers":  [{"id", "host", "pid", "version", "state" (running|draining),
//	                "concurrency", "busy", "done", "failed", "kinds", "started_at", "last_seen"}]
//	              workers heard from within the heartbeat TTL, by id
//	  "pool":     {"name", "at" (Redis's clock),
//	               "total", "available", "leased", "cooling", "disabled",
//	               "in_flight"      live leases in the pool
//	               "credentials": [{"id",
//	                 "state"          available | busy (at its limits) | cooling | disabled
//	                 "max_concurrent", "rate" ("" when none, else N/period),
//	                 "in_flight"      leases held now
//	                 "holders"        [{"owner" (worker/item), "expires"}]
//	                 "cooling_until", "cooling_reason"  (null and "" unless cooling)
//	                 "disabled_reason", "disabled_at"   ("" and null unless disabled)
//	                 "starts_in_window"  starts in the current rate window (0 without a rate)
//	                 "last_used"}]}
//	}
//
// available + busy + cooling + disabled = total; leased counts the
// credentials holding at least one lease, whatever their state.
type statusReport struct {
	At          time.Time      `json:"at"`
	Stream      statusStream   `json:"stream"`
	Consumer    statusConsumer `json:"consumer"`
	DeadLetters uint64         `json:"dead_letters"`
	Results     uint64         `json:"results"`
	Workers     []statusWorker `json:"workers"`
	Pool        statusPool     `json:"pool"`
}

type statusStream struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

type statusConsumer struct {
	Name         string     `json:"name"`
	Pending      uint64     `json:"pending"`
	AckPending   int        `json:"ack_pending"`
	Redelivered  int        `json:"redelivered"`
	WaitingPulls int        `json:"waiting_pulls"`
	LastActive   *time.Time `json:"last_active"`
}

// statusWorker is what a worker announces, as the registry holds it.
type statusWorker = queue.WorkerInfo

type statusPool struct {
	Name        string             `json:"name"`
	At          time.Time          `json:"at"`
	Total       int                `json:"total"`
	Available   int                `json:"available"`
	Leased      int                `json:"leased"`
	Cooling     int                `json:"cooling"`
	Disabled    int                `json:"disabled"`
	InFlight    int                `json:"in_flight"`
	Credentials []statusCredential `json:"credentials"`
}

type statusCredential struct {
	ID             string         `json:"id"`
	State          string         `json:"state"`
	MaxConcurrent  int            `json:"max_concurrent"`
	Rate           string         `json:"rate"`
	InFlight       int            `json:"in_flight"`
	Holders        []statusHolder `json:"holders"`
	CoolingUntil   *time.Time     `json:"cooling_until"`
	CoolingReason  string         `json:"cooling_reason"`
	DisabledReason string         `json:"disabled_reason"`
	DisabledAt     *time.Time     `json:"disabled_at"`
	StartsInWindow int            `json:"starts_in_window"`
	LastUsed       *time.Time     `json:"last_used"`
}

type statusHolder struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func poolReport(st creds.Stats) statusPool {
	out := statusPool{
		Name: st.Pool, At: st.At, Total: st.Total, Available: st.Available, Leased: st.Leased,
		Cooling: st.Cooling, Disabled: st.Disabled, InFlight: st.InFlight, Credentials: []statusCredential{},
	}
	for _, c := range st.Credentials {
		row := statusCredential{
			ID: c.ID, State: c.State, MaxConcurrent: c.MaxConcurrent, Rate: c.Rate, InFlight: c.InFlight,
			Holders: []statusHolder{}, CoolingReason: c.CoolingReason, DisabledReason: c.DisabledReason,
			DisabledAt: timePtr(c.DisabledAt), StartsInWindow: c.StartsInWindow, LastUsed: timePtr(c.LastUsed),
		}
		if c.State == creds.StateCooling {
			row.CoolingUntil = timePtr(c.CoolingUntil)
		} else {
			row.CoolingReason = ""
		}
		for _, h := range c.Holders {
			row.Holders = append(row.Holders, statusHolder{Owner: h.Owner, Expires: h.Expires})
		}
		out.Credentials = append(out.Credentials, row)
	}
	return out
}

func (p *producer) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the queue, the consumer, the workers and the credential pool",
		Long: `status shows the work stream (messages, bytes), the workers' consumer
(pending, ack pending, redelivered, waiting pulls, last activity), the dead
letters, the workers heard from recently, and the credential pool: totals
and one row per credential (in flight, cooling until and why, disabled and
why, starts in the rate window).

--json prints one JSON object with a stable schema instead of the tables:
  at, stream{name,messages,bytes},
  consumer{name,pending,ack_pending,redelivered,waiting_pulls,last_active},
  dead_letters, results, workers[{id,host,pid,version,state,concurrency,busy,
  done,failed,kinds,started_at,last_seen}],
  pool{name,at,total,available,leased,cooling,disabled,in_flight,
  credentials[{id,state,max_concurrent,rate,in_flight,holders[{owner,expires}],
  cooling_until,cooling_reason,disabled_reason,disabled_at,starts_in_window,
  last_used}]}
Times are RFC 3339 or null; every key is always present.

It needs NATS and Redis (exit 3 naming the one that cannot be reached).`,
		Example: `  producer status --config kf.yaml
  producer status --json | jq '.consumer.pending + .consumer.ack_pending'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := p.setup(nil)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout+setupTimeout)
			defer cancel()
			q, closeQ, err := openQueue(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer closeQ()
			pool, closePool, err := openPool(ctx, cfg)
			if err != nil {
				return err
			}
			defer closePool()
			rep, err := readStatus(ctx, q, pool)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(p.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printStatus(p.stdout, rep, q.Config().HeartbeatTTL)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (schema in --help)")
	return cmd
}

func readStatus(ctx context.Context, q *queue.Queue, pool *creds.Pool) (statusReport, error) {
	rep := statusReport{At: time.Now().UTC(), Workers: []statusWorker{}}
	qs, err := q.Stats(ctx)
	if err != nil {
		return rep, unreachable("reading the queue", err)
	}
	rep.Stream = statusStream{Name: qs.Stream.Name, Messages: qs.Stream.Messages, Bytes: qs.Stream.Bytes}
	rep.Consumer = statusConsumer{
		Name: qs.Consumer.Name, Pending: qs.Consumer.Pending, AckPending: qs.Consumer.AckPending,
		Redelivered: qs.Consumer.Redelivered, WaitingPulls: qs.Consumer.Waiting, LastActive: timePtr(qs.Consumer.LastActive),
	}
	rep.DeadLetters, rep.Results = qs.DeadLetters, qs.Results
	ws, err := q.Workers(ctx)
	if err != nil {
		return rep, unreachable("reading the worker registry", err)
	}
	for _, w := range ws {
		if w.Kinds == nil {
			w.Kinds = []string{}
		}
		rep.Workers = append(rep.Workers, w)
	}
	ps, err := pool.Stats(ctx)
	if err != nil {
		return rep, unreachable("reading the credential pool", err)
	}
	rep.Pool = poolReport(ps)
	return rep, nil
}

func printStatus(w io.Writer, r statusReport, heartbeatTTL time.Duration) {
	fmt.Fprintf(w, "Stream %s: %d messages, %s\n", r.Stream.Name, r.Stream.Messages, bytesText(r.Stream.Bytes))
	last := "never"
	if r.Consumer.LastActive != nil {
		last = ago(r.At, *r.Consumer.LastActive)
	}
	fmt.Fprintf(w, "Consumer %s: %d pending, %d ack pending, %d redelivered, %d waiting pulls, last activity %s\n",
		r.Consumer.Name, r.Consumer.Pending, r.Consumer.AckPending, r.Consumer.Redelivered, r.Consumer.WaitingPulls, last)
	fmt.Fprintf(w, "Dead letters: %d    Results kept: %d\n", r.DeadLetters, r.Results)

	fmt.Fprintf(w, "\nWorkers (%d seen in the last %s):\n", len(r.Workers), heartbeatTTL)
	if len(r.Workers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tHOST\tSTATE\tBUSY/SLOTS\tDONE\tFAILED\tKINDS\tVERSION\tLAST SEEN")
		for _, x := range r.Workers {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\t%s\n", x.ID, x.Host, x.State, x.Busy, x.Concurrency,
				x.Done, x.Failed, strings.Join(x.Kinds, ","), x.Version, ago(r.At, x.LastSeen))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printPool(w, r.Pool)
}

// printPool prints the pool's totals and a table of its credentials.
func printPool(w io.Writer, p statusPool) {
	fmt.Fprintf(w, "Pool %s: %d %s: %d available, %d leased, %d cooling, %d disabled (%d %s in flight)\n",
		p.Name, p.Total, plural(p.Total, "credential", "credentials"), p.Available, p.Leased, p.Cooling, p.Disabled,
		p.InFlight, plural(p.InFlight, "lease", "leases"))
	if len(p.Credentials) == 0 {
		fmt.Fprintln(w, "  (no credentials: workers register the ones in their configuration when they start)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATE\tIN FLIGHT\tMAX\tRATE\tSTARTS IN WINDOW\tLAST USED\tCOOLING UNTIL / DISABLED")
	for _, c := range p.Credentials {
		rate, starts := "-", "-"
		if c.Rate != "" {
			rate, starts = c.Rate, fmt.Sprint(c.StartsInWindow)
		}
		used := "never"
		if c.LastUsed != nil {
			used = ago(p.At, *c.LastUsed)
		}
		note := ""
		switch {
		case c.State == creds.StateDisabled:
			note = "disabled: " + oneLine(c.DisabledReason, 100)
			if c.DisabledAt != nil {
				note += " (" + ago(p.At, *c.DisabledAt) + ")"
			}
		case c.CoolingUntil != nil:
			note = fmt.Sprintf("cooling until %s (in %s): %s", c.CoolingUntil.Local().Format("15:04:05"),
				c.CoolingUntil.Sub(p.At).Round(time.Second), oneLine(c.CoolingReason, 100))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", c.ID, c.State, c.InFlight, c.MaxConcurrent, rate, starts, used, note)
	}
	_ = tw.Flush()
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
