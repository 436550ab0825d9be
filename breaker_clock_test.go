package writeguard

import (
	"math"
	"testing"
	"time"
)

// TestFloodWindowAnyClock: the flood breaker's window takes any clock
// reading without panicking (issue 30 item 8: a reading before 1970
// panicked with an index out of range), and a clock stepped back loses
// nothing the window held.
func TestFloodWindowAnyClock(t *testing.T) {
	readings := []time.Time{
		{}, // the zero time, year 1
		time.Unix(-1, 0),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 0),
		time.Unix(math.MaxInt64/4, 0), // far beyond what UnixNano holds
		time.Unix(math.MinInt64/4, 0),
		time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	}
	for _, width := range []time.Duration{time.Second, time.Minute, 10} {
		w := newFloodWindow(width, 1, 0.5)
		total := 0
		for i, now := range readings {
			st := w.record(now, 2, 1)
			total += 2
			if st.Docs < 2 || st.Docs > int64(total) || st.Dead*2 != st.Docs {
				t.Fatalf("width %v, reading %d (%v): docs %d dead %d (recorded %d)", width, i, now, st.Docs, st.Dead, total)
			}
		}
	}
	// A clock stepped back by an hour: the inputs count in the latest
	// slot, with those already there.
	w := newFloodWindow(time.Minute, 100, 0.5)
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	w.record(t0, 10, 0)
	st := w.record(t0.Add(-time.Hour), 10, 10)
	if st.Docs != 20 || st.Dead != 10 {
		t.Fatalf("after a step back: docs %d dead %d, want 20 and 10", st.Docs, st.Dead)
	}
	st = w.record(time.Time{}, 5, 5)
	if st.Docs != 25 || st.Dead != 15 {
		t.Fatalf("after the zero time: docs %d dead %d, want 25 and 15", st.Docs, st.Dead)
	}
}
