package spend

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed ledger.lua
var ledgerLua string

var ledgerScript = redis.NewScript(ledgerLua)

// Ledger is the fleet-wide record of what batches and tenants spend and
// hold reserved, in the pool's Redis (its keys share the pool's hash tag,
// so they live in one Redis Cluster slot). Every change is one atomic
// script: a reservation checks and takes the room of a batch's budget
// and of its tenant's budget of the period at once, so that no budget is
// ever overspent however many starts race.
type Ledger struct {
	rdb redis.Scripter
	key string // KEYS[1]
}

// NewLedger returns the ledger of the pool named pool.
func NewLedger(rdb redis.Scripter, pool string) *Ledger {
	return &Ledger{rdb: rdb, key: "keyfleet:{" + pool + "}:spend:ledger"}
}

// NoLimit is a budget that is not set.
const NoLimit Amount = -1

// Reservation is what one start takes from the budgets that bind it
// until it settles.
type Reservation struct {
	// Token names the start (unique: its lease's fencing token, say).
	Token string
	// Amount is the most the start can cost (Price.Ceiling).
	Amount Amount
	// Batch is the start's batch: its budget is the one the ledger holds
	// (SetBatchBudget).
	Batch string
	// Tenant, Period and TenantBudget: the tenant's budget as the
	// configuration sets it and its current period ("" no tenant;
	// NoLimit: none). A live budget of the tenant (SetTenantBudget)
	// overrides them, read in the same step: its amount, counted in the
	// period of its own kind that At is in (Verdict.Period).
	Tenant, Period string
	TenantBudget   Amount
	// At is when the start is (zero: now): it places a live budget's
	// period.
	At time.Time
	// Expires is when the reservation lapses if the start never settles
	// (its holder died): it is then counted as spent.
	Expires time.Time
}

// Verdict is what Reserve decided.
type Verdict struct {
	// OK: reserved; the start may go.
	OK bool
	// Wait: the budget's room is held by reservations of starts still
	// running; once they settle there may be room.
	Wait bool
	// Exhausted names the budget that cannot cover the start even with no
	// reservation held: "budget" (the batch's) or "tenant-budget".
	Exhausted string
	// Left is what that budget has left after its reservations.
	Left Amount
	// Period is the tenant's period the start was counted in (Settle
	// takes it): the Reservation's, or its live budget's ("" no tenant).
	Period string
}

// Reasons a batch is paused for by its budgets (Verdict.Exhausted).
const (
	ReasonBudget       = "budget"
	ReasonTenantBudget = "tenant-budget"
)

// Reserve takes r.Amount from the batch's budget and the tenant's, or
// neither.
func (l *Ledger) Reserve(ctx context.Context, r Reservation) (Verdict, error) {
	tl := r.TenantBudget
	if r.Tenant == "" {
		tl = NoLimit
	}
	args := append([]any{"reserve", r.Token, int64(r.Amount), r.Expires.UnixMicro(), r.Batch, -1, r.Tenant, r.Period, int64(tl)},
		periodNames(cmp.Or(r.At, time.Now()))...)
	reply, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, args...).StringSlice()
	if err != nil {
		return Verdict{}, fmt.Errorf("spend: reserve: %w", err)
	}
	if len(reply) != 4 {
		return Verdict{}, fmt.Errorf("spend: reserve: unexpected reply %q", reply)
	}
	left, _ := strconv.ParseInt(reply[2], 10, 64)
	period := reply[3]
	if r.Tenant == "" {
		period = ""
	}
	switch reply[0] {
	case "ok":
		return Verdict{OK: true, Period: period}, nil
	case "wait":
		return Verdict{Wait: true, Left: Amount(left), Period: period}, nil
	}
	return Verdict{Exhausted: reply[1], Left: Amount(left), Period: period}, nil
}

// periodNames are the names of the day, the week and the month t is in,
// as the script takes them.
func periodNames(t time.Time) []any {
	return []any{PeriodOf(Day, t), PeriodOf(Week, t), PeriodOf(Month, t)}
}

// Settle ends a start: its reservation (if it made one) gives way to
// what it cost. A start that reserved nothing (no budget binds it) adds
// its cost all the same, so that what every batch and tenant spent is
// known.
func (l *Ledger) Settle(ctx context.Context, token string, actual Amount, batch, tenant, period string) error {
	if err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, "settle", token, int64(actual), batch, tenant, period).Err(); err != nil {
		return fmt.Errorf("spend: settle: %w", err)
	}
	return nil
}

// Account is a budget's figures.
type Account struct {
	Spent, Reserved Amount
	// Need is what the last start it refused needed (0: none refused
	// since one was let through).
	Need Amount
	// Budget is the budget the account is held to (NoLimit: none): a
	// batch's (Read, SetBatchBudget), or a tenant's in force (Tenant).
	Budget Amount
}

// Covers reports whether the account's budget covers its next start
// (what the last refused one needed) beside its reservations.
func (a Account) Covers() bool {
	return a.Budget == NoLimit || a.Budget-a.Spent-a.Reserved >= max(a.Need, 1)
}

// SetBatchBudget sets batch's budget (NoLimit: none) and returns its
// account after the change.
func (l *Ledger) SetBatchBudget(ctx context.Context, batch string, budget Amount) (Account, error) {
	reply, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, "limit", batch, int64(budget)).StringSlice()
	if err != nil {
		return Account{}, fmt.Errorf("spend: set the budget of batch %q: %w", batch, err)
	}
	a := Account{Budget: budget}
	a.Spent, a.Reserved, a.Need = parseAmount(reply, 0), parseAmount(reply, 1), parseAmount(reply, 2)
	return a, nil
}

// Read returns batch's account ("" none) and tenant's in period ("" none).
func (l *Ledger) Read(ctx context.Context, batch, tenant, period string) (b, t Account, err error) {
	reply, err := ledgerScript.Run(ctx, l.rdb, []string{l.key}, "read", batch, tenant, period).StringSlice()
	if err != nil {
		return b, t, fmt.Errorf("spend: read: %w", err)
	}
	b = Account{Spent: parseAmount(reply, 0), Reserved: parseAmount(reply, 1), Need: parseAmount(reply, 2), Budget: parseAmount(reply, 3)}
	t = Account{Spent: parseAmount(reply, 4), Reserved: parseAmount(reply, 5), Need: parseAmount(reply, 6), Budget: NoLimit}
	return b, t, nil
}

func parseAmount(reply []string, i int) Amount {
	if i >= len(reply) {
		return 0
	}
	n, _ := strconv.ParseInt(reply[i], 10, 64)
	return Amount(n)
}
