package kftype_test

import (
	"encoding/json"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

func TestAmount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want kftype.Amount
		out  string
	}{
		{"100", 100 * kftype.Unit, "100"},
		{"12.50", 12*kftype.Unit + kftype.Unit/2, "12.5"},
		{"0.000000001", 1, "0.000000001"},
		{".5", kftype.Unit / 2, "0.5"},
		{"0", 0, "0"},
	} {
		got, err := kftype.ParseAmount(tc.in)
		if err != nil || got != tc.want || got.String() != tc.out {
			t.Errorf("ParseAmount(%q) = %d %v (%q), want %d (%q)", tc.in, got, err, got.String(), tc.want, tc.out)
		}
	}
	for _, bad := range []string{"", "-1", "1e3", "abc", "1.0000000001", "10000000", "1..2", "+3"} {
		if _, err := kftype.ParseAmount(bad); err == nil {
			t.Errorf("ParseAmount(%q): want an error", bad)
		}
	}
	b, _ := json.Marshal(map[string]kftype.Amount{"a": 1234567890})
	var back map[string]kftype.Amount
	if string(b) != `{"a":1.23456789}` || json.Unmarshal(b, &back) != nil || back["a"] != 1234567890 {
		t.Errorf("JSON: %s, back %v", b, back)
	}
}
