package writeguard_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

type fixture struct {
	fake *mocks.Fake
	sink *mocks.Sink
	rec  *mocks.Recorder
	g    *writeguard.Guarded
}

// sleeps returns the backoff waits of the fixture's calls, in order, as
// the hooks reported them (each is waited on the real clock: tests that
// wait run in a testing/synctest bubble, where waiting takes no time).
func (fx *fixture) sleeps() []time.Duration {
	var out []time.Duration
	for _, r := range fx.rec.Retries() {
		out = append(out, r.Delay)
	}
	return out
}

func newFixture(t *testing.T, fake *mocks.Fake, opts ...writeguard.Option) *fixture {
	t.Helper()
	fx := &fixture{fake: fake, sink: &mocks.Sink{}, rec: &mocks.Recorder{}}
	base := []writeguard.Option{
		writeguard.WithDeadLetter(fx.sink),
		writeguard.WithHooks(fx.rec.Hooks()),
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

// idString renders an _id as the driver returns it (a Go value) in
// Extended JSON, to compare it with storedIDs.
func idString(t *testing.T, id any) string {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
	if err != nil {
		t.Fatalf("marshal _id %v: %v", id, err)
	}
	return bson.Raw(raw).Lookup("_id").String()
}
