package check_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
)

func TestList(t *testing.T) {
	var l check.List
	l.AtLeast("a", 500*time.Millisecond, time.Second)
	l.AtLeast("ok", time.Second, time.Second)
	l.AtLeastInt("b", 0, 1)
	l.NotNegative("c", -time.Second)
	l.Positive("d", 0)
	l.Err("e", nil)
	l.Err("", errOf("whole section"))
	want := check.List{
		{Key: "a", Msg: "must be at least 1s, got 500ms"},
		{Key: "b", Msg: "must be at least 1, got 0"},
		{Key: "c", Msg: "must not be negative, got -1s"},
		{Key: "d", Msg: "must be more than 0, got 0s"},
		{Key: "", Msg: "whole section"},
	}
	if len(l) != len(want) {
		t.Fatalf("want %+v, got %+v", want, l)
	}
	for i := range want {
		if l[i] != want[i] {
			t.Errorf("problem %d: want %+v, got %+v", i, want[i], l[i])
		}
	}
	if err := l.AsError("exec"); err == nil || err.Error() != "exec: a: must be at least 1s, got 500ms" {
		t.Errorf("AsError: %v", err)
	}
	if err := l[4:].AsError("exec"); err == nil || err.Error() != "exec: whole section" {
		t.Errorf("AsError without a key: %v", err)
	}
	if err := (check.List{}).AsError("exec"); err != nil {
		t.Errorf("AsError of no problem: %v", err)
	}
}

func TestJoinAndQuote(t *testing.T) {
	for _, tt := range []struct{ section, key, want string }{
		{"", "pool", "pool"},
		{"jobs.exec", "", "jobs.exec"},
		{"jobs.exec", "env.A", "jobs.exec.env.A"},
		{"pool.credentials", "[0]", "pool.credentials[0]"},
	} {
		if got := check.Join(tt.section, tt.key); got != tt.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tt.section, tt.key, got, tt.want)
		}
	}
	if got := check.Quote("a\"b"); got != `"a\"b"` {
		t.Errorf("Quote: %s", got)
	}
	if got := check.Quote(strings.Repeat("é", 61)); got != `"`+strings.Repeat("é", 60)+`…"` {
		t.Errorf("Quote of a long value: %s", got)
	}
}

type errOf string

func (e errOf) Error() string { return string(e) }
