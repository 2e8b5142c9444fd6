package jobs

import (
	"fmt"
	"testing"
	"time"
)

// noterOnClock is a noter whose time is *now, with the notes it passed on.
func noterOnClock(now *time.Time) (*noter, *[]HandlerNote) {
	var got []HandlerNote
	n := newNoter(func(h HandlerNote) { got = append(got, h) })
	n.now = func() time.Time { return *now }
	n.filled = *now
	return n, &got
}

// stderr lines: a burst gets through, then stderrLinesRate a second; each
// line held back is counted in the Dropped of the next one let through,
// so the notes account for every line.
func TestNoterStderrRate(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	n, got := noterOnClock(&now)
	for i := range 2000 {
		n.stderr(7, fmt.Sprintf("flood %d", i))
	}
	if len(*got) != stderrLinesBurst || (*got)[stderrLinesBurst-1].Text != fmt.Sprintf("flood %d", stderrLinesBurst-1) {
		t.Fatalf("%d lines of a flood at one instant logged, want the burst of %d", len(*got), stderrLinesBurst)
	}
	for _, h := range *got {
		if h.Dropped != 0 || h.Cause != NoteStderr || h.PID != 7 {
			t.Fatalf("a line of the burst: %+v", h)
		}
	}

	// Not yet a whole line's worth of time (0.8 of it): held back too.
	soon := time.Second / stderrLinesRate * 8 / 10
	now = now.Add(soon)
	n.stderr(7, "too soon")
	if len(*got) != stderrLinesBurst {
		t.Fatalf("a line logged %s after the burst", soon)
	}
	now = now.Add(soon)
	n.stderr(7, "after")
	last := (*got)[len(*got)-1]
	if len(*got) != stderrLinesBurst+1 || last.Text != "after" || last.Dropped != 2000-stderrLinesBurst+1 {
		t.Fatalf("the line after the flood: %+v (%d logged), want it with %d held back", last, len(*got), 2000-stderrLinesBurst+1)
	}

	// A second's worth: stderrLinesRate lines, the count reset by each.
	*got = nil
	now = now.Add(time.Second)
	for i := range 3 * stderrLinesRate {
		n.stderr(8, fmt.Sprintf("later %d", i))
	}
	if len(*got) != stderrLinesRate {
		t.Fatalf("%d lines logged a second later, want %d", len(*got), stderrLinesRate)
	}
	// A long silence refills no more than the burst.
	*got = nil
	now = now.Add(time.Hour)
	for i := range 2 * stderrLinesBurst {
		n.stderr(8, fmt.Sprintf("next %d", i))
	}
	if len(*got) != stderrLinesBurst || (*got)[0].Dropped != 2*stderrLinesRate {
		t.Fatalf("%d lines logged after an hour (the first says %d held back), want %d and %d",
			len(*got), (*got)[0].Dropped, stderrLinesBurst, 2*stderrLinesRate)
	}
}

// A cause is noted at once, then at most once every noteEvery, with the
// count of those held back; causes are counted apart.
func TestNoterNoteEvery(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	n, got := noterOnClock(&now)
	for range 5 {
		n.note(NoteExit, 1, "exit")
		n.note(NoteStray, 1, "stray")
	}
	now = now.Add(noteEvery - time.Millisecond)
	n.note(NoteExit, 1, "exit")
	now = now.Add(time.Millisecond)
	n.note(NoteExit, 1, "exit, later")
	want := []HandlerNote{
		{Cause: NoteExit, PID: 1, Text: "exit"},
		{Cause: NoteStray, PID: 1, Text: "stray"},
		{Cause: NoteExit, PID: 1, Text: "exit, later", Dropped: 5},
	}
	if fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("notes %+v, want %+v", *got, want)
	}
}
