package kftype

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Amount is an amount of money, in billionths of the currency unit (a
// price per 1,000,000 tokens is then a whole number of billionths per
// thousand tokens). Any currency: keyfleet does not convert.
type Amount int64

// Unit is one currency unit.
const Unit Amount = 1_000_000_000

// maxAmount bounds what ParseAmount takes: a ledger's sums stay exact in
// Lua's doubles (2^53 billionths is some 9 million units).
const maxAmount = 9_000_000 * Unit

// ParseAmount reads a decimal amount ("100", "12.50", "0.000001"), not
// negative, at most 9,000,000, with at most 9 decimals.
func ParseAmount(s string) (Amount, error) {
	t := strings.TrimSpace(s)
	whole, frac, dot := strings.Cut(t, ".")
	if t == "" || whole == "" && frac == "" || strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+") {
		return 0, fmt.Errorf("%q is not an amount (want a number such as 100 or 12.50)", s)
	}
	if dot && len(frac) > 9 {
		return 0, fmt.Errorf("%q has more than 9 decimals", s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%q is not an amount (want a number such as 100 or 12.50)", s)
			}
		}
	}
	w, err := strconv.ParseInt("0"+whole, 10, 64)
	if err != nil || Amount(w) > maxAmount/Unit {
		return 0, fmt.Errorf("%q is more than %d", s, maxAmount/Unit)
	}
	f, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	return Amount(w)*Unit + Amount(f), nil
}

// String writes the amount as a decimal without trailing zeros ("12.5",
// "100", "0.000015").
func (a Amount) String() string {
	neg := ""
	if a < 0 {
		neg, a = "-", -a
	}
	s := fmt.Sprintf("%s%d.%09d", neg, a/Unit, a%Unit)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Float is the amount in currency units.
func (a Amount) Float() float64 { return float64(a) / float64(Unit) }

// MarshalJSON writes the amount as a JSON number of currency units.
func (a Amount) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON reads a JSON number of currency units.
func (a *Amount) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		*a = 0
		return nil
	}
	neg := strings.HasPrefix(s, "-")
	v, err := ParseAmount(strings.TrimPrefix(s, "-"))
	if err != nil {
		// Written by another program with an exponent: take it as a float.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return err
		}
		*a = Amount(math.Round(f * float64(Unit)))
		return nil
	}
	if neg {
		v = -v
	}
	*a = v
	return nil
}
