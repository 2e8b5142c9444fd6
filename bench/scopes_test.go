package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

func TestScopeItems(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		got := scopeItems(20, 80, mixed)
		var order strings.Builder
		for i := range 100 {
			order.WriteString(got[fmt.Sprintf("item-%06d", i)])
		}
		want := strings.Repeat("a", 20) + strings.Repeat("b", 80)
		if mixed {
			want = strings.Repeat("bbbba", 20)
		}
		if order.String() != want {
			t.Errorf("mixed %v: %s, want %s", mixed, order.String(), want)
		}
	}
}

// scopeRatios counts grants from the later first grant, d whole seconds.
func TestScopeRatios(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	scopeOf := map[string]string{}
	var rs []kftype.Result
	add := func(s string, at time.Duration) {
		id := fmt.Sprintf("%s%d", s, len(rs))
		scopeOf[id] = s
		rs = append(rs, kftype.Result{Item: id, LeasedAt: t0.Add(at)})
	}
	// a from t0 at 20/s (its allowed), b from t0+0.5s at 72/s (0.9 of 80/s),
	// both past the 2 s window.
	for i := range 80 {
		add("a", time.Duration(i)*50*time.Millisecond)
	}
	for i := range 288 {
		add("b", 500*time.Millisecond+time.Duration(i)*time.Second/72)
	}
	got, err := scopeRatios(rs, scopeOf, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got["a_ratio"] != 1 || got["b_ratio"] != 0.9 {
		t.Errorf("got %v, want a_ratio 1, b_ratio 0.9", got)
	}
	// b ran out inside the window.
	if _, err := scopeRatios(rs[:100], scopeOf, 2); err == nil || !strings.Contains(err.Error(), "scope b's last start") {
		t.Errorf("b ended inside the window: %v", err)
	}
}
