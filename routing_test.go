package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"pgregory.net/rapid"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// docKind is what the simulated server does with one document on every
// attempt.
type docKind int

const (
	kindOK      docKind = iota
	kindInvalid         // 121: fails the validator every time
	kindDup             // 11000 on k: a stored document holds its key
	kindUnknown         // 8000: an unclassified code, every time
)

// TestRoutingProperties drives random batches through random fault
// scripts (transient per-document errors, lost replies, dropped
// connections) and checks the write path's promises on the outcome.
func TestRoutingProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(rt, "n")
		ordered := rapid.Bool().Draw(rt, "ordered")
		kinds := make([]docKind, n)
		for i := range kinds {
			kinds[i] = docKind(rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("kind%d", i)))
			if rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("weight%d", i)) > 0 {
				kinds[i] = kindOK // mostly good documents
			}
		}
		// One fault per call; calls past the script behave normally.
		calls := rapid.IntRange(0, 8).Draw(rt, "calls")
		type callFault struct {
			network   int // 0 none, 1 lose reply, 2 drop connection
			transient map[int]bool
		}
		script := make([]callFault, calls)
		var faults []mocks.Fault
		for c := range script {
			cf := callFault{network: rapid.IntRange(0, 4).Draw(rt, fmt.Sprintf("net%d", c)), transient: map[int]bool{}}
			if cf.network > 2 {
				cf.network = 0
			}
			var docErrs []mocks.Fault
			for i := 0; i < n; i++ {
				if kinds[i] == kindUnknown {
					docErrs = append(docErrs, mocks.DocError(int32(i), 8000, "AtlasError"))
				} else if rapid.IntRange(0, 4).Draw(rt, fmt.Sprintf("t%d_%d", c, i)) == 0 {
					cf.transient[i] = true
					docErrs = append(docErrs, mocks.DocError(int32(i), 112, "WriteConflict"))
				}
			}
			switch cf.network {
			case 1:
				faults = append(faults, mocks.LoseReply())
			case 2:
				faults = append(faults, mocks.DropConnection())
			default:
				faults = append(faults, mocks.Combine(docErrs...))
			}
			script[c] = cf
		}
		// Unknown documents fail on every call, scripted or not.
		var always []mocks.Fault
		for i := 0; i < n; i++ {
			if kinds[i] == kindUnknown {
				always = append(always, mocks.DocError(int32(i), 8000, "AtlasError"))
			}
		}
		for i := 0; i < 40; i++ {
			faults = append(faults, mocks.Combine(always...))
		}

		fake := mocks.NewFake("db.prop").Unique("k").Validator(func(doc bson.Raw) (bson.Raw, bool) {
			if _, err := doc.LookupErr("bad"); err == nil {
				return nil, true
			}
			return nil, false
		}).Script(faults...)
		if err := fake.Seed(bson.D{{Key: "_id", Value: "seed"}, {Key: "k", Value: "taken"}}); err != nil {
			rt.Fatal(err)
		}
		fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond, Cap: 4 * time.Millisecond, MaxAttempts: 4, Jitter: func() float64 { return 0.5 }}), writeguard.WithBudget(nil))
		docs := make([]any, n)
		for i := range docs {
			d := bson.D{{Key: "n", Value: int32(i)}}
			switch kinds[i] {
			case kindInvalid:
				d = append(d, bson.E{Key: "bad", Value: true})
			case kindDup:
				d = append(d, bson.E{Key: "k", Value: "taken"})
			}
			docs[i] = d
		}
		_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(ordered))

		outcomes := make([]writeguard.Outcome, n)
		var r *writeguard.Report
		switch {
		case err == nil:
			for i := range outcomes {
				outcomes[i] = writeguard.Outcome{Index: i, Disposition: writeguard.Written}
			}
		case errors.As(err, &r):
			if len(r.Outcomes) != n {
				rt.Fatalf("%d outcomes for %d documents", len(r.Outcomes), n)
			}
			copy(outcomes, r.Outcomes)
		default:
			rt.Fatalf("err %v is not a *Report", err)
		}

		// 1. Exactly one terminal disposition per input, in input order,
		// and one Disposition hook per input.
		valid := map[writeguard.Disposition]bool{"written": true, "already_written": true, "dead_lettered": true, "conflict": true,
			"failed": true, "exhausted": true, "not_attempted": true, "unknown": true}
		for i, o := range outcomes {
			if o.Index != i || !valid[o.Disposition] {
				rt.Fatalf("outcome %d: %+v", i, o)
			}
		}
		if len(fx.rec.Dispositions()) != n {
			rt.Fatalf("%d disposition events for %d documents", len(fx.rec.Dispositions()), n)
		}
		seenIdx := map[int]bool{}
		for _, d := range fx.rec.Dispositions() {
			if seenIdx[d.Index] {
				rt.Fatalf("document %d got two dispositions", d.Index)
			}
			seenIdx[d.Index] = true
		}

		// 2. The store holds each document at most once, exactly the
		// written ones (and, for unknown outcomes, perhaps the document).
		stored := map[int32]int{}
		var order []int32
		for _, d := range fake.Docs() {
			if d.Lookup("_id").StringValueOK(); d.Lookup("_id").Type == bson.TypeString {
				continue // the seed
			}
			k := d.Lookup("n").Int32()
			stored[k]++
			order = append(order, k)
		}
		for i, o := range outcomes {
			c := stored[int32(i)]
			if c > 1 {
				rt.Fatalf("document %d stored %d times", i, c)
			}
			switch o.Disposition {
			case writeguard.Written, writeguard.AlreadyWritten:
				if c != 1 {
					rt.Fatalf("document %d is %s but not stored", i, o.Disposition)
				}
			case writeguard.OutcomeUnknown, writeguard.Exhausted:
				// may or may not be stored; must be flagged when it is
				if c == 1 && !o.MaybeWritten {
					rt.Fatalf("document %d is stored, %s, but not flagged MaybeWritten", i, o.Disposition)
				}
			default:
				if c != 0 {
					rt.Fatalf("document %d is %s but stored", i, o.Disposition)
				}
			}
		}

		// 3. Invalid documents: dead-lettered (never stored, never
		// retried after the server rejected them); the DLQ holds each once.
		dlq := map[int32]int{}
		for _, e := range fx.sink.Envelopes() {
			dlq[bson.Raw(e.Original).Lookup("n").Int32()]++
		}
		for i, o := range outcomes {
			if o.Disposition == writeguard.DeadLettered {
				if kinds[i] != kindInvalid || dlq[int32(i)] != 1 {
					rt.Fatalf("document %d dead-lettered: kind %d, %d envelopes", i, kinds[i], dlq[int32(i)])
				}
			}
			if kinds[i] == kindDup && o.Disposition.Stored() {
				rt.Fatalf("duplicate-key document %d was stored", i)
			}
		}
		if len(fx.sink.Envelopes()) != len(dlq) {
			rt.Fatalf("DLQ has %d envelopes for %d documents", len(fx.sink.Envelopes()), len(dlq))
		}

		// 4. Only documents that failed transiently (or were in flight
		// when a reply was lost) are re-sent: a document the server
		// answered definitively for is never sent again. The server is
		// simulated alongside, from the script.
		answered := map[int]bool{}
		simStored := map[int]bool{}
		for c, call := range fake.Calls() {
			var tr map[int]bool
			if c < len(script) {
				tr = script[c].transient
			}
			for _, d := range call.Docs {
				i := int(d.Lookup("n").Int32())
				if answered[i] {
					rt.Fatalf("call %d re-sent document %d after a definitive answer", c, i)
				}
			}
			if call.Fault == "drop_connection" {
				continue
			}
			for _, d := range call.Docs {
				i := int(d.Lookup("n").Int32())
				ok := false
				switch {
				case kinds[i] == kindUnknown && call.Fault != "lose_reply":
				case tr[i] && call.Fault != "lose_reply":
				case kinds[i] == kindInvalid, kinds[i] == kindDup, simStored[i]:
				default:
					ok = true
					simStored[i] = true
				}
				if call.Fault != "lose_reply" && !(tr[i] && kinds[i] != kindUnknown) {
					answered[i] = true
				}
				if ordered && !ok {
					break
				}
			}
		}

		// 5. Ordered writes keep their order in the store.
		if ordered && !sort.SliceIsSorted(order, func(a, b int) bool { return order[a] < order[b] }) {
			rt.Fatalf("ordered write stored out of order: %v", order)
		}

		// 6. Indices map back: the outcome's ID is the stored document's.
		for _, d := range fake.Docs() {
			if d.Lookup("_id").Type == bson.TypeString {
				continue
			}
			i := d.Lookup("n").Int32()
			if id := outcomes[i].ID; r != nil && id != nil && idString(t, id) != d.Lookup("_id").String() {
				rt.Fatalf("outcome %d has id %v, stored %v", i, id, d.Lookup("_id"))
			}
		}
	})
}

// TestBudgetStopsRetries: when the shared budget runs out, retries stop and
// the documents end exhausted, after the refused retry's backoff (a caller
// looping on exhausted documents must not storm the server). In a
// testing/synctest bubble: the waits take no real time.
func TestBudgetStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var script []mocks.Fault
		for i := 0; i < 20; i++ {
			script = append(script, mocks.DropConnection())
		}
		fake := mocks.NewFake("db.budget").Script(script...)
		budget, err := policy.NewBudget(4, 0.1) // two retries, then refused
		if err != nil {
			t.Fatal(err)
		}
		backoff := policy.Backoff{MaxAttempts: 10, MaxElapsed: -1, Jitter: func() float64 { return 0.5 }}
		fx := newFixture(t, fake, writeguard.WithBudget(budget), writeguard.WithBackoff(backoff))
		t0 := time.Now()
		_, err = fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || r.Outcomes[0].Reason != writeguard.ReasonBudgetRefused {
			t.Fatalf("err = %v, want unknown (lost replies) for budget_refused", err)
		}
		if n := len(fake.Calls()); n != 3 {
			t.Errorf("%d attempts, want 3 (1 + 2 retries the budget allowed)", n)
		}
		if fx.rec.BudgetExhausted() != 1 {
			t.Errorf("%d budget-exhausted events, want 1", fx.rec.BudgetExhausted())
		}
		// Waits of 50 and 100 ms before the two retries (full jitter at
		// 0.5 of 100 and 200 ms), then the backoffs of the refused third
		// retry and of every later one the 10 attempts allowed: the call
		// takes as long as its retries would have.
		want := 150*time.Millisecond + backoff.WithDefaults().RefusedWait(3, 10)
		if d := time.Since(t0); d != want || want < 16*time.Second {
			t.Errorf("the call took %v, want %v: the refused retries' backoffs are waited", d, want)
		}
		// The budget is shared: the next call gets no retry at all.
		_, _ = fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
		if n := len(fake.Calls()); n != 4 {
			t.Errorf("%d attempts after a second call, want 4", n)
		}
	})
}

// A document whose verdict in an attempt is to be dead-lettered (121,
// Invalid) while a read-back made for the others of its command (their
// duplicate keys after a lost reply) finds it stored by the earlier
// attempt ends already_written, and is not handed to the sink: the engine
// used to settle it from the read-back and then park it, and panicked
// (done cannot move to parked) out of InsertMany.
func TestReadBackSettlesADocumentToDeadLetter(t *testing.T) {
	fx := newFixture(t, mocks.NewFake("db.rb").Script(mocks.LoseReply(), mocks.DocError("k1", 121, "Document failed validation")))
	docs := []any{bson.D{{Key: "_id", Value: "k0"}}, bson.D{{Key: "_id", Value: "k1"}}, bson.D{{Key: "_id", Value: "k2"}}}
	res, err := fx.g.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))
	if err != nil {
		t.Fatalf("err %v, want nil: every document is stored", err)
	}
	if len(res.InsertedIDs) != 3 || len(storedIDs(t, fx.fake)) != 3 {
		t.Errorf("%d in the result, %d stored; want 3 and 3", len(res.InsertedIDs), len(storedIDs(t, fx.fake)))
	}
	if n := len(fx.sink.Envelopes()); n != 0 {
		t.Errorf("%d envelopes dead-lettered, want none", n)
	}
	for _, d := range fx.rec.Dispositions() {
		if d.Index == 1 && d.Disposition != writeguard.AlreadyWritten {
			t.Errorf("document 1: %s, want already_written", d.Disposition)
		}
	}
}
