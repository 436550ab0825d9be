package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// foTrace records, through writeguard's hooks, what each writer of a
// failover run did and when: its calls, the driver calls (attempts) in
// them, the backoff waits, and the waits after a budget refusal (from the
// BudgetExhausted event to the end of the call: policy.Backoff.RefusedWait).
// Times are from t0, the writers' start.
type foTrace struct {
	t0 time.Time

	mu           sync.Mutex
	ops          map[*hooks.Operation]*foOp
	spans        []foSpan
	attempts     int
	refusals     int
	refusedAt    []time.Duration
	backoff      time.Duration
	refusedWait  time.Duration
	dispositions map[policy.Disposition]int
	codes        map[int32]int  // attempts' first failure codes
	reasons      map[string]int // the Reports' unstored outcomes: "disposition/reason"
}

// report records the unstored outcomes of a Report by disposition and
// reason.
func (t *foTrace) report(r *writeguard.Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range r.Outcomes {
		switch o.Disposition {
		case writeguard.Written, writeguard.AlreadyWritten, writeguard.WrittenUnconfirmed:
		default:
			k := string(o.Disposition) + "/" + o.Reason.String()
			if o.MaybeWritten {
				k += "/maybe"
			}
			t.reasons[k]++
		}
	}
}

// foOp is one guarded call in flight.
type foOp struct {
	writer    int
	start     time.Duration
	attempt   time.Duration // the current attempt's start
	refusedAt time.Duration // -1 until the budget refuses a retry
}

// A foSpan is one interval of a writer's time.
type foSpan struct {
	writer     int
	kind       string // "attempt", "backoff", "refused-wait", "call", "cmd <name>"
	start, end time.Duration
	note       string
}

func (t *foTrace) add(s foSpan) {
	t.mu.Lock()
	t.spans = append(t.spans, s)
	t.mu.Unlock()
}

// timeline returns writer w's spans from from on, in order of start.
func (t *foTrace) timeline(w int, from time.Duration) string {
	t.mu.Lock()
	var ss []foSpan
	for _, s := range t.spans {
		if s.writer == w && s.end >= from {
			ss = append(ss, s)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(ss, func(a, b foSpan) int { return cmp.Compare(a.start, b.start) })
	var sb strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&sb, "\n    %6.3f–%6.3f s %-13s %s", s.start.Seconds(), s.end.Seconds(), s.kind, s.note)
	}
	return sb.String()
}

type foWriterKey struct{}

func newFoTrace() *foTrace {
	return &foTrace{ops: map[*hooks.Operation]*foOp{}, dispositions: map[policy.Disposition]int{}, codes: map[int32]int{}, reasons: map[string]int{}}
}

// withWriter marks ctx as writer w's.
func (t *foTrace) withWriter(ctx context.Context, w int) context.Context {
	return context.WithValue(ctx, foWriterKey{}, w)
}

func (t *foTrace) now() time.Duration { return time.Since(t.t0) }

func (t *foTrace) hooks() hooks.Hooks {
	return hooks.Hooks{
		OperationStarted: func(ctx context.Context, op *hooks.Operation) context.Context {
			w, _ := ctx.Value(foWriterKey{}).(int)
			t.mu.Lock()
			t.ops[op] = &foOp{writer: w, start: t.now(), refusedAt: -1}
			t.mu.Unlock()
			return ctx
		},
		AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
			t.mu.Lock()
			if o := t.ops[ev.Op]; o != nil {
				o.attempt = t.now()
			}
			t.attempts++
			t.mu.Unlock()
			return ctx
		},
		AttemptFinished: func(_ context.Context, ev *hooks.AttemptEnd) {
			t.mu.Lock()
			if o := t.ops[ev.Op]; o != nil {
				t.spans = append(t.spans, foSpan{o.writer, "attempt", o.attempt, t.now(), fmt.Sprintf("attempt %d, %d documents, code %d", ev.Attempt, ev.Documents, ev.Code)})
			}
			t.codes[ev.Code]++
			t.mu.Unlock()
		},
		RetryScheduled: func(_ context.Context, ev *hooks.Retry) {
			t.mu.Lock()
			if o := t.ops[ev.Op]; o != nil {
				now := t.now()
				t.spans = append(t.spans, foSpan{o.writer, "backoff", now, now + ev.Delay, fmt.Sprintf("before attempt %d", ev.Attempt)})
			}
			t.backoff += ev.Delay
			t.mu.Unlock()
		},
		BudgetExhausted: func(_ context.Context, ev *hooks.BudgetExhausted) {
			t.mu.Lock()
			now := t.now()
			if o := t.ops[ev.Op]; o != nil {
				o.refusedAt = now
			}
			t.refusals++
			t.refusedAt = append(t.refusedAt, now)
			t.mu.Unlock()
		},
		Disposition: func(_ context.Context, ev *hooks.Disposition) {
			t.mu.Lock()
			t.dispositions[ev.Disposition]++
			t.mu.Unlock()
		},
		OperationFinished: func(_ context.Context, ev *hooks.OperationEnd) {
			t.mu.Lock()
			defer t.mu.Unlock()
			o := t.ops[ev.Op]
			if o == nil {
				return
			}
			now := t.now()
			t.spans = append(t.spans, foSpan{o.writer, "call", o.start, now, fmt.Sprintf("%d attempts, %v", ev.Attempts, ev.Counts)})
			if o.refusedAt >= 0 {
				t.spans = append(t.spans, foSpan{o.writer, "refused-wait", o.refusedAt, now, ""})
				t.refusedWait += now - o.refusedAt
			}
			delete(t.ops, ev.Op)
		},
	}
}

// after sums, for writer w (every writer when w < 0), the time each kind
// of span covers after from.
func (t *foTrace) after(w int, from time.Duration) map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Duration{}
	for _, s := range t.spans {
		if w >= 0 && s.writer != w || s.end <= from {
			continue
		}
		out[s.kind] += s.end - max(s.start, from)
	}
	return out
}

// withoutReadBacks estimates when the last writer would have finished had
// its read-backs taken no time: the latest, over the writers, of its end
// less the time its read-back queries took (an estimate: the writers
// compete for the server, and the others' read-backs slow each one's
// inserts too).
func (t *foTrace) withoutReadBacks(ends []time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	rb := make([]time.Duration, len(ends))
	for _, s := range t.spans {
		if s.kind == "cmd find" && s.writer >= 0 && s.writer < len(rb) {
			rb[s.writer] += s.end - s.start
		}
	}
	var last time.Duration
	for w, e := range ends {
		last = max(last, e-rb[w])
	}
	return last
}

// count returns the number of spans of kind that start in [from, to).
func (t *foTrace) count(kind string, from, to time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.spans {
		if s.kind == kind && s.start >= from && s.start < to {
			n++
		}
	}
	return n
}

// summary describes the run: attempts before, during and after the
// outage, refusals and when they came, the waits, the dispositions, and
// where the writer that finished last spent its time after the outage's
// end (in driver calls, backoff waits, refused waits, and the rest of its
// calls: read-backs and writeguard's own work; and between calls).
func (t *foTrace) summary(r foResult) string {
	var sb strings.Builder
	const big = time.Hour
	fmt.Fprintf(&sb, "attempts %d (before the outage %d, during %d, after %d); ", t.attempts,
		t.count("attempt", 0, r.start), t.count("attempt", r.start, r.end), t.count("attempt", r.end, big))
	if len(t.refusedAt) > 0 {
		fmt.Fprintf(&sb, "budget refusals %d (from %.2f s to %.2f s); ", t.refusals, t.refusedAt[0].Seconds(), t.refusedAt[len(t.refusedAt)-1].Seconds())
	}
	fmt.Fprintf(&sb, "backoff waited %.2f s, refused waits %.2f s; dispositions %v; unstored in Reports %v; attempt codes %v; ",
		t.backoff.Seconds(), t.refusedWait.Seconds(), t.dispositions, t.reasons, t.codes)
	last := 0
	for w, e := range r.writersEnd {
		if e > r.writersEnd[last] {
			last = w
		}
	}
	fmt.Fprintf(&sb, "read-backs %s; ", t.durations("cmd find"))
	crit := t.after(last, r.end)
	all := t.after(-1, r.end)
	fmt.Fprintf(&sb, "after the outage's end (%.2f s): writer %d, last to finish at %.2f s, spent %s; all writers: %s",
		r.end.Seconds(), last, r.writersEnd[last].Seconds(), spanSplit(crit, r.writersEnd[last]-r.end), spanSplit(all, 0))
	return sb.String()
}

// durations describes the spans of kind: how many, when they started and
// how long they took (shortest, median, longest).
func (t *foTrace) durations(kind string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ds, starts []float64
	for _, s := range t.spans {
		if s.kind == kind {
			ds = append(ds, (s.end - s.start).Seconds())
			starts = append(starts, s.start.Seconds())
		}
	}
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d started %.2f–%.2f s, taking %.2f/%.2f/%.2f s (min/median/max)", len(ds),
		slices.Min(starts), slices.Max(starts), slices.Min(ds), median(ds), slices.Max(ds))
}

// spanSplit formats the time per kind; with total > 0 it adds the time
// outside calls (between a writer's calls).
func spanSplit(m map[string]time.Duration, total time.Duration) string {
	inCall := m["call"] - m["attempt"] - m["backoff"] - m["refused-wait"]
	s := fmt.Sprintf("driver calls %.2f s, backoff %.2f s, refused waits %.2f s, rest of its calls %.2f s",
		m["attempt"].Seconds(), m["backoff"].Seconds(), m["refused-wait"].Seconds(), inCall.Seconds())
	if total > 0 {
		s += fmt.Sprintf(", between calls %.2f s", (total - m["call"]).Seconds())
	}
	return s
}
