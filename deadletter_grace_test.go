package writeguard_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/mocks"
)

// graceCall runs one InsertMany of three invalid documents with a real
// deadline that passes while the server answers the write command (the
// validator waits for it): the call's writes were done in time, and its
// dead-letter Put comes after the deadline. It returns the Report and
// the envelopes the file sink holds.
func graceCall(t *testing.T, opts ...writeguard.Option) (*writeguard.Report, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var once sync.Once
	fake := mocks.NewFake("db.grace").Validator(func(bson.Raw) (bson.Raw, bool) {
		once.Do(func() { <-ctx.Done() }) // the deadline passes during the command
		return nil, true
	})
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	sink, err := dlq.NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	g, err := writeguard.New(fake, append([]writeguard.Option{writeguard.WithDeadLetter(sink)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	docs := []any{bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}, bson.D{{Key: "n", Value: 3}}}
	_, err = g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)) // one command
	if ctx.Err() == nil {
		t.Fatal("the deadline had not passed when the call returned")
	}
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	envs, rerr := dlq.ReadFile(path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return r, len(envs)
}

// TestDeadLetterGraceOutlivesDeadline: a call whose context's deadline
// passes just after its last write command still dead-letters its
// invalid documents (WithDeadLetterGrace, default 5 s): they end
// dead_lettered, in the sink, and the call is Handled. Issue 30 item 5.
func TestDeadLetterGraceOutlivesDeadline(t *testing.T) {
	r, stored := graceCall(t)
	for i, o := range r.Outcomes {
		if o.Disposition != writeguard.DeadLettered {
			t.Errorf("document %d: %s (%v), want dead_lettered", i, o.Disposition, o.Err)
		}
	}
	if stored != 3 {
		t.Errorf("the sink holds %d envelopes, want 3", stored)
	}
	if !r.Handled() {
		t.Errorf("the call is not Handled: %v", r)
	}
}

// TestDeadLetterGraceZero: WithDeadLetterGrace(0) ends the Puts with the
// caller's context: the same call's documents end dead_letter_failed (as
// before the grace existed), so the test above is not passing by chance.
func TestDeadLetterGraceZero(t *testing.T) {
	r, stored := graceCall(t, writeguard.WithDeadLetterGrace(0))
	for i, o := range r.Outcomes {
		if o.Disposition != writeguard.DeadLetterFailed {
			t.Errorf("document %d: %s, want dead_letter_failed", i, o.Disposition)
		}
	}
	if stored != 0 {
		t.Errorf("the sink holds %d envelopes, want 0", stored)
	}
	if _, err := writeguard.New(mocks.NewFake("db.x"), writeguard.WithDeadLetterGrace(-time.Second)); err == nil {
		t.Error("WithDeadLetterGrace(-1s) accepted")
	}
}
