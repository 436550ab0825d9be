package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// dlBacklog captures 5 invalid orders (3 missing qty, 2 with qty < 1)
// and 2 valid ones, and returns the dead-lettered documents as sent.
func dlBacklog(t *testing.T, b *dlBed) []bson.Raw {
	t.Helper()
	rep := b.capture(b.guard(),
		dlDoc("sku", "A"), dlDoc("sku", "B"), dlDoc("_id", "order-C", "sku", "C"),
		dlDoc("sku", "D", "qty", int32(0)), dlDoc("sku", "E", "qty", int32(-2)),
		dlDoc("sku", "F", "qty", int32(1)), dlDoc("sku", "G", "qty", int32(2)),
	)
	var out []bson.Raw
	for _, o := range rep.Outcomes {
		if o.Disposition == writeguard.DeadLettered {
			out = append(out, o.Document)
		}
	}
	if len(out) != 5 {
		t.Fatalf("%d dead-lettered, want 5", len(out))
	}
	return out
}

// targetHasOnce checks that the target holds each document exactly once,
// as sent.
func targetHasOnce(t *testing.T, b *dlBed, docs []bson.Raw) {
	t.Helper()
	for _, d := range docs {
		id := d.Lookup("_id")
		var got []bson.Raw
		cur, err := b.ddb.Collection(dlTarget).Find(b.ctx, bson.D{{Key: "_id", Value: id}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cur.All(b.ctx, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Errorf("target holds %d documents with _id %v, want 1", len(got), id)
			continue
		}
		if got[0].Lookup("sku").StringValue() != d.Lookup("sku").StringValue() {
			t.Errorf("target document %v differs from the original %v", got[0], d)
		}
	}
}

// TestDLReplayAfterWidening: after the validator is widened every
// envelope is replayed once; the envelopes say replayed; a second run has
// nothing to do.
func TestDLReplayAfterWidening(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dead := dlBacklog(t, b)
	b.setValidator(nil) // widened: qty no longer required
	var progress []replay.Progress
	res, err := replayRun(b, b.replayTarget(), replay.WithBatchSize(2), replay.WithProgress(func(p replay.Progress) { progress = append(progress, p) }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Scanned != 5 || res.Replayed != 5 || res.StillInvalid+res.Conflicts+res.Failed+res.Skipped != 0 || res.Batches != 3 {
		t.Errorf("result %+v", res)
	}
	if len(progress) != 3 || progress[2].Replayed != 5 || progress[0].Scanned != 2 {
		t.Errorf("progress %+v", progress)
	}
	for _, e := range b.envelopes() {
		if e.Status != envelope.StatusReplayed || e.ReplayedAt.IsZero() || e.Attempts != 1 {
			t.Errorf("envelope %v: status %q replayed_at %v attempts %d", e.DocumentID, e.Status, e.ReplayedAt, e.Attempts)
		}
	}
	targetHasOnce(t, b, dead)
	if n := b.count(dlTarget, bson.D{}); n != 7 {
		t.Errorf("target holds %d documents, want 7", n)
	}

	res, err = replayRun(b, b.replayTarget())
	if err != nil || res.Scanned != 0 || res.Batches != 0 {
		t.Errorf("second run: %+v, %v", res, err)
	}
	// Listing replayed envelopes replays them again: all met by _id.
	res, err = replayRun(b, b.replayTarget(), replay.WithFilter(dlq.Filter{Statuses: []string{envelope.StatusReplayed}}))
	if err != nil || res.Replayed != 5 || res.ReplayedByDuplicate != 5 {
		t.Errorf("replaying replayed envelopes: %+v, %v", res, err)
	}
	if n := b.count(dlTarget, bson.D{}); n != 7 {
		t.Errorf("target holds %d documents after a third run, want 7", n)
	}
}

// TestDLReplayCrashSafety: a crash between the target write and the
// envelope update leaves the document in the target and the envelope
// pending; the next run meets the duplicate _id and counts it replayed.
func TestDLReplayCrashSafety(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dead := dlBacklog(t, b)
	b.setValidator(nil)
	// The "crashed" run wrote two originals (one with writeguard's _id,
	// one with the caller's) and never marked their envelopes.
	for _, d := range dead[1:3] {
		if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	res, err := replayRun(b, b.replayTarget())
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != 5 || res.ReplayedByDuplicate != 2 || res.Conflicts != 0 {
		t.Errorf("result %+v", res)
	}
	targetHasOnce(t, b, dead)
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusReplayed}}); n != 5 {
		t.Errorf("%d envelopes replayed, want 5", n)
	}
}

// TestDLReplayConflict: the target holds a different document under an
// original's (caller-chosen) _id: a conflict, left pending.
func TestDLReplayConflict(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	b.setValidator(nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "order-C", "sku", "someone else's")); err != nil {
		t.Fatal(err)
	}
	res, err := replayRun(b, b.replayTarget())
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != 4 || res.Conflicts != 1 || len(res.Problems) != 1 || res.Problems[0].Outcome != "conflict" || res.Problems[0].Code != 11000 {
		t.Errorf("result %+v", res)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}, {Key: "document_id", Value: "order-C"}}); n != 1 {
		t.Errorf("conflicting envelope not pending")
	}
}

// TestDLReplayStillInvalid: with the validator unchanged every envelope
// goes back to pending with attempts + 1 and a later last_seen, and no
// new envelope appears; a plain *mongo.Collection target works the same.
func TestDLReplayStillInvalid(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	before := b.envelopes()
	time.Sleep(5 * time.Millisecond)
	res, err := replayRun(b, b.replayTarget())
	if err != nil {
		t.Fatal(err)
	}
	if res.StillInvalid != 5 || res.Replayed != 0 || res.TargetDeadLettered != 0 {
		t.Errorf("result %+v", res)
	}
	after := b.envelopes()
	if len(after) != 5 {
		t.Errorf("%d envelopes after the replay, want 5", len(after))
	}
	for fp, e := range after {
		if e.Status != envelope.StatusPending || e.Attempts != 2 || !e.LastSeen.After(before[fp].LastSeen) {
			t.Errorf("envelope %v: status %q attempts %d last_seen %v → %v", e.DocumentID, e.Status, e.Attempts, before[fp].LastSeen, e.LastSeen)
		}
	}
	// The raw collection as target: the driver's BulkWriteException.
	res, err = replayRun(b, b.adb.Collection(dlTarget))
	if err != nil || res.StillInvalid != 5 {
		t.Errorf("plain collection target: %+v, %v", res, err)
	}
	if st, _ := dlq.Stats(b.ctx, b.dlq, dlq.Filter{}); st.Attempts != 15 {
		t.Errorf("attempts %d after two replays, want 15", st.Attempts)
	}
	if n := b.count(dlTarget, bson.D{}); n != 2 {
		t.Errorf("target holds %d documents, want 2", n)
	}
}

// TestDLReplayTargetDeadLetters: a target that dead-letters itself is
// detected (TargetDeadLettered); the replay leaves those envelopes to the
// target's sink, which makes new envelopes for payloads whose _id
// writeguard had assigned (their fingerprint now includes the _id): the
// documented reason to replay through a target without WithDeadLetter.
func TestDLReplayTargetDeadLetters(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	res, err := replayRun(b, b.guard())
	if err != nil {
		t.Fatal(err)
	}
	if res.StillInvalid != 5 || res.TargetDeadLettered != 5 {
		t.Errorf("result %+v", res)
	}
	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// 1 envelope with the caller's _id was recaptured in place (attempts
	// 2); 4 writeguard-assigned ones got a second envelope each.
	if st.Envelopes != 9 || st.Attempts != 10 {
		t.Errorf("%d envelopes with %d attempts, want 9 and 10", st.Envelopes, st.Attempts)
	}
}

// TestDLReplayFilterAndSkips: a keyword filter replays only its
// envelopes; truncated and redacted originals are skipped; another
// namespace's envelopes are left alone.
func TestDLReplayFilterAndSkips(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	redacted := dlq.NewMongoSink(b.dlq, dlq.WithRedact(func(o bson.Raw) bson.Raw {
		d := bson.D{{Key: "_id", Value: o.Lookup("_id")}, {Key: "sku", Value: "REDACTED"}}
		raw, _ := bson.Marshal(d)
		return raw
	}))
	orig, _ := bson.Marshal(dlDoc("_id", "secret-1", "sku", "S", "ssn", "123"))
	if err := redacted.Put(b.ctx, []envelope.Envelope{{Original: orig, Code: 121, Namespace: b.ns(), Operation: "insertOne",
		FailingKeywords: []string{"minimum"}, FailingPaths: []string{"qty"}}}); err != nil {
		t.Fatal(err)
	}
	other, _ := bson.Marshal(dlDoc("_id", "u1", "name", "x"))
	if err := b.sink.Put(b.ctx, []envelope.Envelope{{Original: other, Code: 121, Namespace: b.dbName + ".users", Operation: "insertOne",
		FailingKeywords: []string{"minimum"}}}); err != nil {
		t.Fatal(err)
	}
	b.setValidator(nil)
	res, err := replayRun(b, b.replayTarget(), replay.WithFilter(dlq.Filter{Keywords: []string{"minimum"}}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Scanned != 3 || res.Replayed != 2 || res.Skipped != 1 || !strings.Contains(res.Problems[0].Reason, "redacted") {
		t.Errorf("result %+v", res)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}}); n != 5 {
		t.Errorf("%d envelopes pending, want 5 (3 required, 1 redacted, 1 other namespace)", n)
	}
	res, err = replayRun(b, b.replayTarget(), replay.WithRedacted(), replay.WithRate(1000))
	if err != nil || res.Replayed != 4 {
		t.Errorf("with redacted: %+v, %v", res, err)
	}
	var stored bson.Raw
	if err := b.ddb.Collection(dlTarget).FindOne(b.ctx, bson.D{{Key: "_id", Value: "secret-1"}}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	if _, err := stored.LookupErr("ssn"); err == nil {
		t.Error("the redacted field reached the target")
	}
}

// TestDLReplayModels: bulkWrite envelopes of replaceOne and deleteMany
// models are replayed by running the models again, when the replay is
// allowed to (WithOperations, and WithMultiDocument for the deleteMany). (An updateOne model's
// envelope holds its $set in original.update, which FerretDB refuses to
// store: field names starting with "$" are a write error there, while
// MongoDB 5.0+ stores them; see TestDLRealCaptureAndReplay.)
func TestDLReplayModels(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertMany(b.ctx, []any{
		dlDoc("_id", int32(1), "sku", "A", "qty", int32(1)), dlDoc("_id", int32(2), "sku", "gone")}); err != nil {
		t.Fatal(err)
	}
	model, _ := bson.Marshal(dlDoc("op", "replaceOne", "filter", dlDoc("_id", int32(1)),
		"replacement", dlDoc("sku", "A", "qty", int32(5)), "upsert", false))
	del, _ := bson.Marshal(dlDoc("op", "deleteMany", "filter", dlDoc("sku", "gone")))
	if err := b.sink.Put(b.ctx, []envelope.Envelope{
		{Original: model, Code: 121, Namespace: b.ns(), Operation: "bulkWrite", FailingKeywords: []string{"maximum"}},
		{Original: del, Code: 121, Namespace: b.ns(), Operation: "bulkWrite", BatchIndex: 1},
	}); err != nil {
		t.Fatal(err)
	}
	res, err := replayRun(b, b.replayTarget(), replay.WithOperations(replay.Inserts|replay.Replaces|replay.Deletes),
		replay.WithMultiDocument())
	if err != nil || res.Replayed != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	var got []bson.Raw
	cur, err := b.ddb.Collection(dlTarget).Find(b.ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(b.ctx, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Lookup("qty").Int32() != 5 {
		t.Errorf("models not applied: %v", got)
	}
}

// TestDLDryRunFerretDB: FerretDB cannot evaluate a validator over the
// envelopes ($replaceRoot is 238 NotImplemented): a clear error, no
// crash, no write. Without a validator (FerretDB targets have none) every
// insert envelope would pass.
func TestDLDryRunFerretDB(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	res, err := replayRun(b, b.replayTarget(), replay.WithDryRun(), replay.WithValidator(dlSchema))
	if !errors.Is(err, replay.ErrDryRunUnsupported) || !strings.Contains(err.Error(), "dry run unsupported on this server") ||
		!strings.Contains(err.Error(), "238") {
		t.Errorf("err = %v", err)
	}
	if !res.DryRun || res.Matched != 5 {
		t.Errorf("result %+v", res)
	}
	res, err = replayRun(b, b.replayTarget(), replay.WithDryRun())
	if err != nil || res.WouldPass != 5 || res.Validator != nil {
		t.Errorf("no validator: %+v, %v", res, err)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}, {Key: "attempts", Value: 1}}); n != 5 {
		t.Errorf("a dry run changed envelopes: %d untouched", n)
	}
	if n := b.count(dlTarget, bson.D{}); n != 2 {
		t.Errorf("a dry run wrote to the target: %d documents", n)
	}
	// A hand-edited envelope the replay cannot decode (and so skips) is
	// undetermined in the dry run, never "would pass".
	if _, err := b.dlq.UpdateOne(b.ctx, bson.D{{Key: "status", Value: envelope.StatusPending}}, bson.D{{Key: "$set", Value: bson.D{{Key: "attempts", Value: "three"}}}}); err != nil {
		t.Fatal(err)
	}
	res, err = replayRun(b, b.replayTarget(), replay.WithDryRun())
	if err != nil || res.WouldPass != 4 || res.Undetermined != 1 {
		t.Errorf("one undecodable envelope: %+v, %v; want 4 would pass, 1 undetermined", res, err)
	}
}

// TestDLReplayStopsWhenTargetDown: every write of a batch failing with a
// non-validation error stops the run with an error; nothing is lost.
func TestDLReplayStopsWhenTargetDown(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("insert").In(b.ns()).Always().Do(
		faultproxy.ErrorReply(faultproxy.CommandError{Code: 13, CodeName: "Unauthorized"}))))
	res, err := replayRun(b, b.replayTarget())
	if err == nil || !strings.Contains(err.Error(), "every write of batch 1 failed") {
		t.Errorf("err = %v", err)
	}
	if res.Failed != 5 || res.Replayed != 0 {
		t.Errorf("result %+v", res)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}, {Key: "attempts", Value: 1}}); n != 5 {
		t.Errorf("%d envelopes untouched, want 5", n)
	}
	if !slices.ContainsFunc(res.Problems, func(p replay.Problem) bool { return p.Outcome == "failed" && p.Code == 13 }) {
		t.Errorf("problems %+v", res.Problems)
	}
}
