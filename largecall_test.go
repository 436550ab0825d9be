package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// countedDoc is a document that counts its encodings, and fails to encode
// when bad is set.
type countedDoc struct {
	n       int
	bad     bool
	encoded *atomic.Int64
}

func (d countedDoc) MarshalBSON() ([]byte, error) {
	d.encoded.Add(1)
	if d.bad {
		return nil, fmt.Errorf("document %d cannot be encoded", d.n)
	}
	return bson.Marshal(bson.D{{Key: "n", Value: d.n}})
}

// aheadTarget records, at every InsertMany, how many documents writeguard
// had encoded beyond those sent so far (this command included), and calls
// onCall before it forwards the command.
type aheadTarget struct {
	*mocks.Fake
	encoded  *atomic.Int64
	sent     int64
	maxAhead int64
	aheads   []int64 // per command
	onCall   func(call int)
	after    func(call int) // after the command's reply
	calls    int
}

func (a *aheadTarget) InsertMany(ctx context.Context, documents any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	a.calls++
	a.sent += int64(reflect.ValueOf(documents).Len())
	a.aheads = append(a.aheads, a.encoded.Load()-a.sent)
	a.maxAhead = max(a.maxAhead, a.aheads[len(a.aheads)-1])
	if a.onCall != nil {
		a.onCall(a.calls)
	}
	res, err := a.Fake.InsertMany(ctx, documents, opts...)
	if a.after != nil {
		a.after(a.calls)
	}
	return res, err
}

func countedDocs(n int, encoded *atomic.Int64, bad ...int) []countedDoc {
	docs := make([]countedDoc, n)
	for i := range docs {
		docs[i] = countedDoc{n: i, encoded: encoded}
	}
	for _, i := range bad {
		docs[i].bad = true
	}
	return docs
}

// A call larger than one command prepares each document just before the
// command that carries it (at most one document ahead), not all of them
// before the first command, and lets the bytes of each stored document
// go: its Outcome keeps the _id, not the Document. The commands are the
// driver's (95 documents, 10 per command: 10 commands), and a failed
// command's documents are re-sent with the next ones, each stored once.
func TestLargeCallPreparesAsItGoes(t *testing.T) {
	ctx := context.Background()
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			var encoded atomic.Int64
			tg := &aheadTarget{Fake: mocks.NewFake("db.large").Limits(10, 0), encoded: &encoded}
			g, err := writeguard.New(tg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.InsertMany(ctx, countedDocs(95, &encoded), options.InsertMany().SetOrdered(ordered))
			if err != nil {
				t.Fatal(err)
			}
			if tg.calls != 10 || tg.maxAhead > 1 || encoded.Load() != 95 {
				t.Errorf("%d commands, up to %d documents encoded ahead, %d encodings; want 10, at most 1, 95", tg.calls, tg.maxAhead, encoded.Load())
			}
			if got := storedIDs(t, tg.Fake); len(got) != 95 || fmt.Sprint(got) != fmt.Sprint(idStrings(t, res.InsertedIDs)) {
				t.Errorf("stored %v, result %v: want the same 95 _ids in order", got, res.InsertedIDs)
			}
		})
	}
	t.Run("a dropped connection in the middle", func(t *testing.T) {
		var encoded atomic.Int64
		tg := &aheadTarget{Fake: mocks.NewFake("db.large").Limits(10, 0).Script(mocks.Pass(), mocks.Pass(), mocks.DropConnection()), encoded: &encoded}
		g, err := writeguard.New(tg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := g.InsertMany(ctx, countedDocs(95, &encoded), options.InsertMany().SetOrdered(false))
		if err != nil {
			t.Fatal(err)
		}
		if got := storedIDs(t, tg.Fake); len(got) != 95 || len(res.InsertedIDs) != 95 || tg.calls != 11 || tg.maxAhead > 11 {
			t.Errorf("%d stored, %d in the result, %d commands, %d ahead; want 95, 95, 11 and at most one command ahead", len(got), len(res.InsertedIDs), tg.calls, tg.maxAhead)
		}
	})
}

// The Report of a large call: the stored documents keep their _id and
// no bytes; a document that could not be encoded stops an ordered call
// where it stands (found when its command is prepared), and every
// document after it is not_attempted with its prepared bytes and _id, so
// that Remaining finishes the call.
func TestLargeCallReport(t *testing.T) {
	ctx := context.Background()
	var encoded atomic.Int64
	tg := &aheadTarget{Fake: mocks.NewFake("db.large").Limits(10, 0), encoded: &encoded}
	g, err := writeguard.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertMany(ctx, countedDocs(95, &encoded, 25))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Report", err)
	}
	// The first two commands go with at most one document prepared
	// ahead; the bad one is met when the third is prepared, and the rest
	// is then prepared for the Report before the third command leaves.
	if tg.calls != 3 || tg.aheads[0] > 1 || tg.aheads[1] > 1 || tg.aheads[2] != 95-25 {
		t.Errorf("%d commands, documents ahead %v; want 3 (the documents before the bad one), [≤1 ≤1 70]", tg.calls, tg.aheads)
	}
	checkLargeReport(t, r, 25, writeguard.Failed)

	// Remaining sends the rest with their _ids.
	rm := r.Remaining()
	if rm.Len() != 95-26 {
		t.Fatalf("remaining %d, want %d", rm.Len(), 95-26)
	}
	if _, err := g.InsertMany(rm.Context(ctx), rm.Documents); err != nil {
		t.Fatal(err)
	}
	if got := storedIDs(t, tg.Fake); len(got) != 94 {
		t.Errorf("%d stored after finishing, want 94", len(got))
	}
}

// A context that ends in the middle of a large call (before the third
// command reaches the server): the documents not prepared yet are
// prepared for the Report (not_attempted, with their _id and bytes),
// none is left without a disposition.
func TestLargeCallContextEnds(t *testing.T) {
	var encoded atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tg := &aheadTarget{Fake: mocks.NewFake("db.large").Limits(10, 0), encoded: &encoded, onCall: func(call int) {
		if call == 3 {
			cancel()
		}
	}}
	g, err := writeguard.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertMany(ctx, countedDocs(95, &encoded), options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Report", err)
	}
	if tg.calls != 3 {
		t.Errorf("%d commands, want 3", tg.calls)
	}
	checkLargeReport(t, r, 20, writeguard.NotAttempted)
}

// checkLargeReport checks a Report of 95 documents whose first stop were
// stored: written without Document, the stop-th one with disposition
// atStop, every one after it not_attempted with its Document and its _id.
func checkLargeReport(t *testing.T, r *writeguard.Report, stop int, atStop writeguard.Disposition) {
	t.Helper()
	for _, o := range r.Outcomes {
		switch {
		case o.Index < stop:
			if o.Disposition != writeguard.Written || o.Document != nil || o.ID == nil {
				t.Errorf("outcome %d: %s, document %v, _id %v; want written, no document, an _id", o.Index, o.Disposition, o.Document, o.ID)
			}
		case o.Index == stop:
			if o.Disposition != atStop {
				t.Errorf("outcome %d: %s, want %s", o.Index, o.Disposition, atStop)
			}
		default:
			if o.Disposition != writeguard.NotAttempted || o.Document == nil || o.Document.Lookup("n").Int32() != int32(o.Index) ||
				idString(t, o.ID) != o.Document.Lookup("_id").String() {
				t.Errorf("outcome %d: %s, document %v, _id %v; want not_attempted with its document and _id", o.Index, o.Disposition, o.Document, o.ID)
			}
		}
	}
}

func idStrings(t *testing.T, ids []any) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = idString(t, id)
	}
	return out
}

// A configuration failure in the middle of a large call stops it as a
// whole: no command after it, every document not sent yet given up with
// its _id and bytes (C27's rule, on a call of several commands).
func TestLargeCallConfigurationStops(t *testing.T) {
	var encoded atomic.Int64
	tg := &aheadTarget{Fake: mocks.NewFake("db.large").Limits(10, 0).Script(mocks.Pass(), mocks.Reply(
		`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":20,"codeName":"IllegalOperation","errmsg":"Transaction numbers are only allowed on a replica set member or mongos"}]}`)),
		encoded: &encoded}
	g, err := writeguard.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertMany(context.Background(), countedDocs(95, &encoded), options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) || !errors.Is(err, writeguard.ErrConfiguration) {
		t.Fatalf("err = %v, want a *Report of a configuration failure", err)
	}
	if tg.calls != 2 {
		t.Errorf("%d commands, want 2 (none after the configuration failure)", tg.calls)
	}
	for _, o := range r.Outcomes {
		switch {
		case o.Index < 10:
			if o.Disposition != writeguard.Written {
				t.Errorf("outcome %d: %s, want written", o.Index, o.Disposition)
			}
		case o.Index < 20:
			if o.Disposition != writeguard.Failed {
				t.Errorf("outcome %d: %s, want failed", o.Index, o.Disposition)
			}
		default:
			if o.Disposition != writeguard.NotAttempted || o.Document == nil || o.ID == nil {
				t.Errorf("outcome %d: %s, document %v, _id %v; want not_attempted with its document and _id", o.Index, o.Disposition, o.Document, o.ID)
			}
		}
	}
}

// A context that ends while an ordered write sends its tail in a window
// (after a dead-lettered document), between two commands, leaves no
// document without a disposition: those beyond the window are
// not_attempted too.
func TestContextEndsInOrderedWindow(t *testing.T) {
	var encoded atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := mocks.NewFake("db.window").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		return nil, doc.Lookup("n").Int32()%8 == 1
	})
	tg := &aheadTarget{Fake: fake, encoded: &encoded, after: func(call int) {
		if call == 3 {
			cancel()
		}
	}}
	g, err := writeguard.New(tg, writeguard.WithDeadLetter(&mocks.Sink{}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertMany(ctx, countedDocs(60, &encoded))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Report", err)
	}
	counts := map[writeguard.Disposition]int{}
	for _, o := range r.Outcomes {
		counts[o.Disposition]++
		if o.Disposition == "" {
			t.Errorf("outcome %d has no disposition", o.Index)
		}
	}
	if tg.calls != 3 || counts[writeguard.NotAttempted] == 0 {
		t.Errorf("%d commands, dispositions %v; want 3 commands and the rest not_attempted", tg.calls, counts)
	}
}

// Limits too small for any statement (a maxMessageSizeBytes under the
// 16 KiB margin) still move the call on: one document per command, the
// call returns.
func TestLargeCallTinyLimits(t *testing.T) {
	var encoded atomic.Int64
	fake := mocks.NewFake("db.large").Limits(0, 10000)
	g, err := writeguard.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.InsertMany(ctx, countedDocs(30, &encoded)); err != nil {
		t.Fatal(err)
	}
	if len(fake.Calls()) != 30 || len(fake.Docs()) != 30 {
		t.Errorf("%d commands, %d stored; want one command per document, 30", len(fake.Calls()), len(fake.Docs()))
	}
}

// panicDoc is a document whose MarshalBSON panics.
type panicDoc struct{}

func (panicDoc) MarshalBSON() ([]byte, error) { panic("boom") }

// A document whose encoder panics, met after earlier commands stored
// their documents, fails alone with a *PanicError: the call returns its
// Report (the stored documents written, an ordered call's tail
// not_attempted), and sending the call again with the document mended
// stores nothing twice.
func TestLargeCallEncoderPanics(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			fake := mocks.NewFake("db.large").Limits(7, 0)
			g, err := writeguard.New(fake)
			if err != nil {
				t.Fatal(err)
			}
			docs := make([]any, 30)
			for i := range docs {
				docs[i] = bson.D{{Key: "n", Value: i}}
			}
			docs[20] = panicDoc{}
			_, err = g.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(ordered))
			var r *writeguard.Report
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a *Report", err)
			}
			var p *writeguard.PanicError
			if o := r.Outcomes[20]; o.Disposition != writeguard.Failed || o.Failure == nil || !errors.As(o.Failure.Err, &p) {
				t.Fatalf("outcome 20: %s, failure %v; want failed with a *PanicError", o.Disposition, o.Failure)
			}
			wantAfter, stored := writeguard.Written, 29
			if ordered {
				wantAfter, stored = writeguard.NotAttempted, 20
			}
			for _, o := range r.Outcomes {
				if want := map[bool]writeguard.Disposition{true: writeguard.Written, false: wantAfter}[o.Index < 20]; o.Index != 20 && o.Disposition != want {
					t.Errorf("outcome %d: %s, want %s", o.Index, o.Disposition, want)
				}
			}
			if len(fake.Docs()) != stored {
				t.Errorf("%d stored, want %d", len(fake.Docs()), stored)
			}
			rm := r.Remaining()
			if _, err := g.InsertMany(rm.Context(context.Background()), rm.Documents); ordered && err != nil {
				t.Fatal(err)
			}
			if len(fake.Docs()) != 29 {
				t.Errorf("%d stored after finishing, want 29 (each once)", len(fake.Docs()))
			}
		})
	}
}

// An ordered write that stopped reports its whole untouched tail
// not_attempted, including the documents after the stop that could not be
// prepared (with their failure) or are too large (not dead-lettered: the
// write never reached them).
func TestOrderedTailUntouched(t *testing.T) {
	fake := mocks.NewFake("db.tail").Limits(7, 0)
	sink := &mocks.Sink{}
	g, err := writeguard.New(fake, writeguard.WithDeadLetter(sink))
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]any, 40)
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}}
	}
	docs[10] = bson.D{{Key: "c", Value: make(chan int)}}                // cannot be encoded: the write stops
	docs[12] = bson.D{{Key: "c", Value: make(chan int)}}                // in the same command
	docs[30] = bson.D{{Key: "c", Value: make(chan int)}}                // in a later one
	docs[35] = bson.D{{Key: "big", Value: strings.Repeat("x", 17<<20)}} // too large
	_, err = g.InsertMany(context.Background(), docs)
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Report", err)
	}
	for _, o := range r.Outcomes {
		switch {
		case o.Index < 10 && o.Disposition != writeguard.Written,
			o.Index == 10 && o.Disposition != writeguard.Failed,
			o.Index > 10 && o.Disposition != writeguard.NotAttempted:
			t.Errorf("outcome %d: %s", o.Index, o.Disposition)
		}
	}
	for _, i := range []int{12, 30, 35} {
		if o := r.Outcomes[i]; o.Failure == nil || o.Reason != writeguard.ReasonOrderedStop {
			t.Errorf("outcome %d: failure %v, reason %s; want its prepare failure and ordered_stop", i, o.Failure, o.Reason)
		}
	}
	if n := len(sink.Envelopes()); n != 0 {
		t.Errorf("%d envelopes, want none (the write never reached the large document)", n)
	}
}

// Caller bytes with bytes after their declared length: the document is
// what the length declares, as the driver sends it.
func TestRawTrailingBytes(t *testing.T) {
	fake := mocks.NewFake("db.raw")
	g, err := writeguard.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := bson.Marshal(bson.D{{Key: "a", Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.InsertMany(context.Background(), []any{bson.Raw(append(doc, 0xde, 0xad)), bson.D{{Key: "b", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	stored := fake.Docs()
	if len(stored) != 2 || stored[0].Validate() != nil || stored[0].Lookup("a").Int32() != 1 || len(stored[0]) != len(doc)+17 {
		t.Errorf("stored %v, want the declared document with its _id", stored)
	}
}

// InsertMany reads a caller's []any as it is, through every command and
// retry of the call, and never writes to it: after the call the caller's
// slice holds the same values in the same places (the call does not clear
// its entries as it does for a copy of a slice of another type).
func TestInsertManyLeavesCallersSlice(t *testing.T) {
	ctx := context.Background()
	tg := mocks.NewFake("db.shared").Limits(10, 0).Script(mocks.Pass(), mocks.DropConnection())
	g, err := writeguard.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]any, 35)
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}}
	}
	before := slices.Clone(docs)
	res, err := g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		if fmt.Sprint(docs[i]) != fmt.Sprint(before[i]) {
			t.Fatalf("the caller's docs[%d] is %v after the call, want %v", i, docs[i], before[i])
		}
	}
	if got := storedIDs(t, tg); len(got) != 35 || len(res.InsertedIDs) != 35 {
		t.Errorf("%d stored, %d in the result; want 35 and 35", len(got), len(res.InsertedIDs))
	}
}
