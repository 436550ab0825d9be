package e2e

// Originals too large to be stored with their envelope: kept whole in
// pieces in the DLQ's side collection (dlq/pieces.go), reassembled by
// replay; an envelope is stored only once its pieces are.

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// dlBigDoc returns a document of exactly size bytes, {_id, qty: 0, blob}:
// invalid under dlSchema (qty < 1).
func dlBigDoc(t *testing.T, id string, size int) bson.Raw {
	t.Helper()
	mk := func(n int) bson.Raw {
		return mustRaw(t, dlDoc("_id", id, "qty", int32(0), "blob", bson.Binary{Data: bytes.Repeat([]byte{'x'}, n)}))
	}
	doc := mk(size - 64)
	doc = mk(size - 64 + size - len(doc))
	if len(doc) != size {
		t.Fatalf("document is %d bytes, want %d", len(doc), size)
	}
	return doc
}

// TestDLLargeOriginalStoredWhole: a rejected document of 16,777,056 bytes
// (too large to fit with its envelope) is dead-lettered with its original
// whole: the envelope records it in original_pieces, its small errInfo
// verbatim and nothing cut; the pieces are in <dlq>_pieces; stats count it;
// after the schema is widened the replay writes the document byte for
// byte. (It used to be reported dead_lettered while the DLQ held a
// 29-byte truncated original, which replay skipped.)
func TestDLLargeOriginalStoredWhole(t *testing.T) {
	b := newDLBed(t, dlSchema)
	doc := dlBigDoc(t, "big-1", 16_777_056)
	_, err := b.guard().InsertOne(b.ctx, doc)
	var rep *writeguard.Report
	if !errors.As(err, &rep) || !writeguard.Handled(err) || rep.Outcomes[0].Disposition != writeguard.DeadLettered {
		t.Fatalf("InsertOne: %v", err)
	}
	envs := b.stored(bson.D{})
	if len(envs) != 1 {
		t.Fatalf("%d envelopes", len(envs))
	}
	e := envs[0]
	if e.OriginalPieces == nil || e.OriginalPieces.Size != int64(len(doc)) || e.OriginalPieces.Count != 2 || e.OriginalTruncated {
		t.Fatalf("envelope: pieces %+v, truncated %v", e.OriginalPieces, e.OriginalTruncated)
	}
	if len(e.Cut) != 0 || len(e.ErrInfo) == 0 || e.ErrInfo.Lookup("writeguard_truncated").Type != 0 {
		t.Errorf("cut %+v, errInfo %v: want errInfo verbatim", e.Cut, e.ErrInfo)
	}
	if n := b.count(dlDLQ+dlq.PiecesCollectionSuffix, bson.D{{Key: "sha256", Value: e.OriginalPieces.SHA256}}); n != 2 {
		t.Errorf("%d pieces stored, want 2", n)
	}
	orig, err := dlq.ReadOriginal(b.ctx, b.dlq, e.Envelope)
	if err != nil || !bytes.Equal(orig, doc) {
		t.Fatalf("ReadOriginal: %d bytes, %v", len(orig), err)
	}
	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil || st.InPieces != 1 || st.Pieces.Sets != 1 || st.Pieces.Pieces != 2 || st.Pieces.Orphans+st.Pieces.Unnamed+st.Pieces.Incomplete != 0 {
		t.Errorf("stats: in pieces %d, pieces %+v, %v", st.InPieces, st.Pieces, err)
	}

	b.setValidator(nil)
	res, err := replayRun(b, b.replayTarget())
	if err != nil || res.Replayed != 1 {
		t.Fatalf("replay: %+v, problems %+v, %v", res.Counts, res.Problems, err)
	}
	var got bson.Raw
	if err := b.ddb.Collection(dlTarget).FindOne(b.ctx, bson.D{{Key: "_id", Value: "big-1"}}).Decode(&got); err != nil || !bytes.Equal(got, doc) {
		t.Errorf("target holds %d bytes (%v), want the %d of the original", len(got), err, len(doc))
	}

	// The replayed envelope keeps its pieces (it is kept for inspection,
	// as a discarded one is); once it is gone (the TTL monitor, an
	// operator) they are an orphan, which a sweep removes.
	if st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{}); err != nil || st.Pieces.Sets != 1 || st.Pieces.Orphans != 0 {
		t.Errorf("stats after the replay: %+v, %v", st.Pieces, err)
	}
	if _, err := b.dlq.DeleteMany(b.ctx, bson.D{}); err != nil {
		t.Fatal(err)
	}
	if n, err := dlq.SweepPieces(b.ctx, b.dlq, dlq.OrphanGrace); err != nil || n != 0 {
		t.Errorf("sweep within the grace: %d, %v; want none removed (a Put may be under way)", n, err)
	}
	if n, err := dlq.SweepPieces(b.ctx, b.dlq, 0); err != nil || n != 1 {
		t.Errorf("sweep: %d, %v; want the orphaned set removed", n, err)
	}
	if n := b.count(dlDLQ+dlq.PiecesCollectionSuffix, bson.D{}); n != 0 {
		t.Errorf("%d pieces left", n)
	}
}

// TestDLPutKilledMidway: a Put of a large original cut off (its
// connection closed, as a process killed there) between its pieces and
// its envelope, or after its first piece: no envelope is stored (nothing
// claims the document is dead-lettered), the pieces are unnamed (not yet
// orphans: a Put may be under way) and no replay sees them; the next Put
// of the same envelope stores it whole, reusing the pieces.
func TestDLPutKilledMidway(t *testing.T) {
	for _, at := range []string{"before the envelope", "after the first piece"} {
		t.Run(at, func(t *testing.T) {
			b := newDLBed(t, nil)
			doc := dlBigDoc(t, "big-2", 16_770_000)
			env := envelope.Envelope{Original: doc, Code: 121, Namespace: b.ns(), Operation: "insertOne",
				DocumentID: doc.Lookup("_id"), FailingKeywords: []string{"minimum"}, FailingPaths: []string{"qty"}}
			reached := make(chan struct{}, 16)
			kill := faultproxy.Custom(func(*faultproxy.Command, func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
				reached <- struct{}{}
				return nil, faultproxy.ErrCloseConnection
			})
			rule := faultproxy.On("update").In(b.dbName + "." + dlDLQ).Always().Do(kill)
			if at != "before the envelope" {
				rule = faultproxy.On("insert").In(b.dbName + "." + dlDLQ + dlq.PiecesCollectionSuffix).Do(faultproxy.ApplyThenClose(1))
			}
			b.proxy.SetScript(faultproxy.MustScript(rule))
			sink := dlq.NewMongoSink(b.proxiedDLQ())
			if err := sink.Put(b.ctx, []envelope.Envelope{env}); err == nil {
				t.Fatal("the cut-off Put returned no error")
			}
			if at == "before the envelope" && len(reached) == 0 {
				t.Fatal("the envelope's write never came")
			}
			if n := b.count(dlDLQ, bson.D{}); n != 0 {
				t.Fatalf("%d envelopes stored by the cut-off Put", n)
			}
			st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
			if err != nil || st.Pieces.Unnamed != 1 || st.Pieces.Orphans != 0 || st.Envelopes != 0 {
				t.Errorf("stats %+v, %v; want one unnamed piece set", st.Pieces, err)
			}
			if res, err := replayRun(b, b.replayTarget()); err != nil || res.Scanned != 0 {
				t.Errorf("replay: %+v, %v; want nothing", res.Counts, err)
			}
			b.proxy.SetScript(nil)
			if err := sink.Put(b.ctx, []envelope.Envelope{env}); err != nil {
				t.Fatal(err)
			}
			envs := b.stored(bson.D{})
			if len(envs) != 1 || envs[0].OriginalPieces == nil {
				t.Fatalf("envelopes %d", len(envs))
			}
			if orig, err := dlq.ReadOriginal(b.ctx, b.dlq, envs[0].Envelope); err != nil || !bytes.Equal(orig, doc) {
				t.Errorf("ReadOriginal: %d bytes, %v", len(orig), err)
			}
			if n := b.count(dlDLQ+dlq.PiecesCollectionSuffix, bson.D{}); n != 2 {
				t.Errorf("%d pieces, want 2 (reused, not duplicated)", n)
			}
		})
	}
}

// TestDLLargeOriginalFallback: when the pieces cannot be stored (the
// side collection refuses them: 13 Unauthorized) the envelope is not
// stored in the DLQ; the fallback file sink keeps the original whole,
// and without a fallback the document ends dead_letter_failed, kept in
// the Report.
func TestDLLargeOriginalFallback(t *testing.T) {
	b := newDLBed(t, dlSchema)
	refuse := faultproxy.On("insert").In(b.dbName + "." + dlDLQ + dlq.PiecesCollectionSuffix).Always().
		Do(faultproxy.ErrorReply(faultproxy.CommandError{Code: 13, CodeName: "Unauthorized", Message: "not authorized on pieces"}))
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.Validator(b.ns(), dlSchema), refuse))
	sink := dlq.NewMongoSink(b.proxiedDLQ())
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	file, err := dlq.NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := dlBigDoc(t, "big-3", 16_777_056)
	g, err := writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithDeadLetter(sink), writeguard.WithFallbackDeadLetter(file),
		writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertOne(b.ctx, doc)
	var rep *writeguard.Report
	if !errors.As(err, &rep) || rep.Outcomes[0].Disposition != writeguard.DeadLettered {
		t.Fatalf("with a fallback: %v", err)
	}
	if n := b.count(dlDLQ, bson.D{}); n != 0 {
		t.Errorf("%d envelopes in the DLQ without their original", n)
	}
	lines, err := dlq.ReadFile(path)
	if err != nil || len(lines) != 1 || !bytes.Equal(lines[0].Original, doc) {
		t.Fatalf("fallback file: %d envelopes, %v", len(lines), err)
	}

	g, err = writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithDeadLetter(sink), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertOne(b.ctx, doc)
	if !errors.As(err, &rep) || rep.Outcomes[0].Disposition != writeguard.DeadLetterFailed || !bytes.Equal(rep.Outcomes[0].Document, doc) {
		t.Fatalf("without a fallback: %v", err)
	}
	t.Logf("dead_letter_failed: %v", rep.Outcomes[0].Err)
	if n := b.count(dlDLQ, bson.D{}); n != 0 {
		t.Errorf("%d envelopes in the DLQ without their original", n)
	}
	if _, err := replay.Run(b.ctx, b.dlq, b.replayTarget()); err != nil {
		t.Errorf("replay of an empty DLQ: %v", err)
	}
}
