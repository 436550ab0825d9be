package writeguard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// orderBatch returns n order documents with _ids from first; they carry
// qty, not the sku a changed validator will require.
func orderBatch(first, n int) []bson.D {
	docs := make([]bson.D, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: first + i}, {Key: "qty", Value: 1}}
	}
	return docs
}

// TestDeadLetterBreakerFlood is the flood the breaker exists for: a
// validator change (sku becomes required; the producer does not send it)
// sends every document to the DLQ. With the breaker at 50 % over 60 s and
// 100 documents, the tenth call of 20 rejected documents after 200 good
// ones brings the share to 200/400 and turns loud — 10 s into the flood,
// within the window — and every later call that dead-letters is loud too.
// No document is lost: each one is stored or in the sink, with its
// disposition in the Report. When the validator is fixed and the window
// has passed, the breaker has closed by itself.
func TestDeadLetterBreakerFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var requireSKU atomic.Bool
		fake := mocks.NewFake("db.flood").Validator(func(doc bson.Raw) (bson.Raw, bool) {
			if !requireSKU.Load() {
				return nil, false
			}
			_, err := doc.LookupErr("sku")
			return nil, err != nil
		})
		var logs bytes.Buffer
		fx := newFixture(t, fake,
			writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{Threshold: 0.5, Window: time.Minute, MinDocuments: 100}),
			writeguard.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))

		next, stored, parked := 0, 0, 0
		call := func() error {
			_, err := fx.g.InsertMany(ctx, orderBatch(next, 20))
			next += 20
			time.Sleep(time.Second)
			return err
		}
		for i := range 10 {
			if err := call(); err != nil {
				t.Fatalf("good call %d: %v", i, err)
			}
			stored += 20
		}

		requireSKU.Store(true) // the validator change
		start := time.Now()
		loudAt := -1
		for i := range 15 {
			err := call()
			parked += 20
			var r *writeguard.Report
			if !errors.As(err, &r) || r.Count(writeguard.DeadLettered) != 20 {
				t.Fatalf("flood call %d: err = %v, want a Report with 20 dead_lettered", i, err)
			}
			loud := !writeguard.Handled(err)
			if loud != errors.Is(err, writeguard.ErrDeadLetterFlood) || loud == r.Handled() {
				t.Fatalf("flood call %d: Handled %v, Report.Handled %v, errors.Is(ErrDeadLetterFlood) %v: they must agree",
					i, writeguard.Handled(err), r.Handled(), errors.Is(err, writeguard.ErrDeadLetterFlood))
			}
			if loud && loudAt < 0 {
				loudAt = i
				var fe *writeguard.FloodError
				if !errors.As(err, &fe) || fe.Documents != 400 || fe.DeadLettered != 200 || fe.Share != 0.5 || fe.CallDeadLettered != 20 {
					t.Fatalf("first loud call: FloodError %+v, want 200 of 400 documents, share 0.5, 20 of this call", fe)
				}
				if !strings.Contains(err.Error(), "dead-letter flood breaker open (50% of 400 documents in 1m0s)") {
					t.Errorf("Report.Error() = %q: does not say why", err.Error())
				}
				if got := r.ErrorType(); got != "dead_letter_flood" {
					t.Errorf("ErrorType() = %q, want dead_letter_flood", got)
				}
				if d := time.Since(start); d >= time.Minute {
					t.Errorf("loud after %v, want within the 1m window", d)
				}
			}
			if loudAt >= 0 && !loud {
				t.Fatalf("flood call %d is handled after call %d turned loud, while the flood goes on", i, loudAt)
			}
		}
		if loudAt != 9 {
			t.Fatalf("the first loud call is flood call %d, want 9 (200 dead-lettered of 400)", loudAt)
		}
		if !strings.Contains(logs.String(), "dead-letter flood breaker open") {
			t.Errorf("no log line for the breaker opening; logs:\n%s", logs.String())
		}

		// Nothing lost: every document is stored or in the sink.
		if got := len(fake.Docs()); got != stored {
			t.Errorf("%d documents stored, want %d", got, stored)
		}
		if got := len(fx.sink.Envelopes()); got != parked {
			t.Errorf("%d envelopes in the sink, want %d", got, parked)
		}

		// The validator is fixed; a minute later the flood has left the
		// window: the breaker has closed by itself, and a call that
		// dead-letters one document (a real bad one) is handled again.
		requireSKU.Store(false)
		time.Sleep(time.Minute)
		docs := orderBatch(next, 20)
		docs[3] = bson.D{{Key: "_id", Value: next + 3}, {Key: "qty", Value: 1}, {Key: "bad", Value: true}}
		fake.Validator(func(doc bson.Raw) (bson.Raw, bool) { _, err := doc.LookupErr("bad"); return nil, err == nil })
		_, err := fx.g.InsertMany(ctx, docs)
		if !errors.Is(err, writeguard.ErrDeadLettered) || !writeguard.Handled(err) || errors.Is(err, writeguard.ErrDeadLetterFlood) {
			t.Fatalf("after the window: err = %v, Handled %v; want one handled dead letter", err, writeguard.Handled(err))
		}
		if !strings.Contains(logs.String(), "dead-letter flood breaker closed") {
			t.Errorf("no log line for the breaker closing; logs:\n%s", logs.String())
		}
	})
}

// TestDeadLetterBreakerOffByDefault: without WithDeadLetterBreaker a call
// that dead-letters every document is handled, however many there are.
func TestDeadLetterBreakerOffByDefault(t *testing.T) {
	fake := mocks.NewFake("db.nobreaker").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
	fx := newFixture(t, fake)
	for i := range 5 {
		_, err := fx.g.InsertMany(context.Background(), orderBatch(i*200, 200))
		if !writeguard.Handled(err) || errors.Is(err, writeguard.ErrDeadLetterFlood) {
			t.Fatalf("call %d: err = %v, want handled", i, err)
		}
	}
}

// TestDeadLetterBreakerMinDocuments: below MinDocuments in the window the
// breaker stays closed, whatever the share.
func TestDeadLetterBreakerMinDocuments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.min").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
		fx := newFixture(t, fake, writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{MinDocuments: 50}))
		for i := range 5 { // 40 documents, all dead-lettered
			_, err := fx.g.InsertMany(context.Background(), orderBatch(i*8, 8))
			if !writeguard.Handled(err) {
				t.Fatalf("call %d (%d documents in the window): err = %v, want handled", i, (i+1)*8, err)
			}
			time.Sleep(time.Second)
		}
		_, err := fx.g.InsertMany(context.Background(), orderBatch(100, 10)) // 50
		if writeguard.Handled(err) || !errors.Is(err, writeguard.ErrDeadLetterFlood) {
			t.Fatalf("at 50 documents: err = %v, want the flood", err)
		}
	})
}

// TestDeadLetterBreakerConfig: each field out of range is named.
func TestDeadLetterBreakerConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  writeguard.BreakerConfig
		want string
	}{
		{writeguard.BreakerConfig{Threshold: 1.5}, "Threshold 1.5"},
		{writeguard.BreakerConfig{Threshold: -0.1}, "Threshold -0.1"},
		{writeguard.BreakerConfig{Window: time.Millisecond}, "Window 1ms"},
		{writeguard.BreakerConfig{MinDocuments: -1}, "MinDocuments -1"},
	} {
		_, err := writeguard.New(mocks.NewFake("db.cfg"), writeguard.WithDeadLetterBreaker(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := writeguard.New(mocks.NewFake("db.cfg"), writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{})); err != nil {
		t.Errorf("zero BreakerConfig (defaults): %v", err)
	}
}

// TestDeadLetterBreakerConcurrent: calls from many goroutines share one
// breaker (run with -race); every document ends stored or in the sink,
// and once the flood is on, calls that dead-letter are loud.
func TestDeadLetterBreakerConcurrent(t *testing.T) {
	fake := mocks.NewFake("db.concurrent").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, err := doc.LookupErr("bad")
		return nil, err == nil
	})
	fx := newFixture(t, fake, writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{Threshold: 0.5, MinDocuments: 50}))
	const workers, calls, size = 8, 20, 10
	var loud, handled atomic.Int64
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for c := range calls {
				docs := orderBatch((w*calls+c)*size, size)
				for i := range docs {
					docs[i] = append(docs[i], bson.E{Key: "bad", Value: true}) // all rejected
				}
				_, err := fx.g.InsertMany(context.Background(), docs)
				if !errors.Is(err, writeguard.ErrDeadLettered) {
					t.Errorf("err = %v, want dead-lettered", err)
				}
				if writeguard.Handled(err) {
					handled.Add(1)
				} else if errors.Is(err, writeguard.ErrDeadLetterFlood) {
					loud.Add(1)
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	// The first 4 calls (40 documents) are under MinDocuments; from the
	// fifth on, the share is 100 %.
	if handled.Load() != 4 || loud.Load() != workers*calls-4 {
		t.Errorf("%d handled and %d loud calls, want 4 and %d", handled.Load(), loud.Load(), workers*calls-4)
	}
	if got := len(fx.sink.Envelopes()); got != workers*calls*size {
		t.Errorf("%d envelopes, want %d: nothing lost", got, workers*calls*size)
	}
}
