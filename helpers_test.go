package writeguard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// recorder counts hook events.
type recorder struct {
	mu      sync.Mutex
	retries []hooks.Retry
	disps   []hooks.Disposition
	ends    []hooks.OperationEnd
	budget  int
}

func (r *recorder) hooks() hooks.Hooks {
	return hooks.Hooks{
		RetryScheduled: func(_ context.Context, ev *hooks.Retry) {
			r.mu.Lock()
			r.retries = append(r.retries, *ev)
			r.mu.Unlock()
		},
		Disposition: func(_ context.Context, ev *hooks.Disposition) {
			r.mu.Lock()
			r.disps = append(r.disps, *ev)
			r.mu.Unlock()
		},
		OperationFinished: func(_ context.Context, ev *hooks.OperationEnd) {
			r.mu.Lock()
			r.ends = append(r.ends, *ev)
			r.mu.Unlock()
		},
		BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) {
			r.mu.Lock()
			r.budget++
			r.mu.Unlock()
		},
	}
}

type fixture struct {
	fake  *mocks.Fake
	sink  *mocks.Sink
	clock *mocks.Clock
	rec   *recorder
	g     *writeguard.Guarded
}

func newFixture(t *testing.T, fake *mocks.Fake, opts ...writeguard.Option) *fixture {
	t.Helper()
	fx := &fixture{fake: fake, sink: &mocks.Sink{}, clock: mocks.NewClock(time.Unix(1_700_000_000, 0)), rec: &recorder{}}
	base := []writeguard.Option{
		writeguard.WithDeadLetter(fx.sink),
		writeguard.WithClock(fx.clock),
		writeguard.WithHooks(fx.rec.hooks()),
		writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}),
	}
	g, err := writeguard.New(fake, append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	fx.g = g
	return fx
}

// ids returns the _id values stored in the fake, in insertion order, as
// Extended JSON strings.
func storedIDs(t *testing.T, f *mocks.Fake) []string {
	t.Helper()
	var out []string
	for _, d := range f.Docs() {
		out = append(out, d.Lookup("_id").String())
	}
	return out
}

func dispositions(r *writeguard.Report) []writeguard.Disposition {
	out := make([]writeguard.Disposition, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Disposition
	}
	return out
}

var fakeStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
