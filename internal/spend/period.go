package spend

import (
	"fmt"
	"strings"
	"time"
)

// Budget periods of a tenant (UTC calendar days, ISO weeks, months).
const (
	Day   = "d"
	Week  = "w"
	Month = "mo"
)

// Budget is an amount per period: a tenant's budget (tenants.<t>.budget,
// written AMOUNT/PERIOD: 100/d, 500/w, 2000/mo).
type Budget struct {
	Amount Amount
	Period string
}

// ParseBudget reads AMOUNT/PERIOD.
func ParseBudget(s string) (Budget, error) {
	amt, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Budget{}, fmt.Errorf("%q: want AMOUNT/PERIOD, such as 100/d (period d, w or mo)", s)
	}
	a, err := ParseAmount(amt)
	if err != nil {
		return Budget{}, err
	}
	switch per {
	case Day, Week, Month:
	default:
		return Budget{}, fmt.Errorf("%q: unknown period %q (want d, w or mo: UTC calendar days, weeks, months)", s, per)
	}
	return Budget{Amount: a, Period: per}, nil
}

func (b Budget) String() string { return b.Amount.String() + "/" + b.Period }

// PeriodOf names the period of kind period that t is in (UTC): 2026-11-27,
// 2026-W48 (ISO week), 2026-11.
func PeriodOf(period string, t time.Time) string {
	t = t.UTC()
	switch period {
	case Week:
		y, w := t.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case Month:
		return t.Format("2006-01")
	}
	return t.Format("2006-01-02")
}

// PeriodEnd is when the period of kind period that t is in ends (UTC).
func PeriodEnd(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case Week:
		wd := (int(day.Weekday()) + 6) % 7 // Monday 0
		return day.AddDate(0, 0, 7-wd)
	case Month:
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return day.AddDate(0, 0, 1)
}
