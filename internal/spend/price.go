package spend

import (
	"fmt"
	"math"
)

// Price is a model's price per 1,000,000 tokens, in currency units:
// pool.prices.<model>.
type Price struct {
	Input  float64 `yaml:"input"`
	Output float64 `yaml:"output"`
}

// ValidPrice reports whether f can be a price per 1,000,000 tokens: a
// number from 0 to 1,000,000.
func ValidPrice(f float64) bool {
	return f >= 0 && f <= 1e6 && !math.IsNaN(f)
}

// Check reports a price that is not one, naming its field.
func (p Price) Check() error {
	for _, v := range []struct {
		name string
		f    float64
	}{{"input", p.Input}, {"output", p.Output}} {
		if !ValidPrice(v.f) {
			return fmt.Errorf("%s: %v is not a price per 1,000,000 tokens (want 0 or more)", v.name, v.f)
		}
	}
	return nil
}

// tokensPerPrice is how many tokens a price is for.
const tokensPerPrice = 1_000_000

// Of is what in input and out output tokens cost at p, times discount
// (1: none; a Batch API's, 0.5), rounded to the nearest billionth.
func (p Price) Of(in, out int64, discount float64) Amount {
	perToken := float64(Unit) / tokensPerPrice // billionths per token at a price of 1
	v := (float64(in)*p.Input + float64(out)*p.Output) * perToken * discount
	return Amount(math.Round(v))
}

// Ceiling is the most in input and out output tokens can cost at p,
// rounded up: what a budget reserves for a start.
func (p Price) Ceiling(in, out int64) Amount {
	perToken := float64(Unit) / tokensPerPrice
	v := (float64(in)*p.Input + float64(out)*p.Output) * perToken
	return Amount(math.Ceil(v))
}

// Prices are the prices by model (an item's scope).
type Prices map[string]Price

// Lookup returns model's price and whether it has one.
func (ps Prices) Lookup(model string) (Price, bool) {
	p, ok := ps[model]
	return p, ok
}
