package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
	"github.com/writeguard/writeguard/replay"
)

// fmtSent records the write commands a client sends to the target.
type fmtSent struct {
	mu   sync.Mutex
	cmds []bson.Raw
}

func (s *fmtSent) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if c, ok := e.Command.Lookup(e.CommandName).StringValueOK(); ok && c == dlTarget {
			s.mu.Lock()
			s.cmds = append(s.cmds, append(bson.Raw(nil), e.Command...))
			s.mu.Unlock()
		}
	}}
}

// statements returns the statements (documents, updates or deletes) of
// the recorded commands, in order.
func (s *fmtSent) statements(t *testing.T) []bson.Raw {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []bson.Raw
	for _, c := range s.cmds {
		for _, k := range []string{"documents", "updates", "deletes"} {
			arr, ok := c.Lookup(k).ArrayOK()
			if !ok {
				continue
			}
			vals, _ := arr.Values()
			for _, v := range vals {
				out = append(out, v.Document())
			}
		}
	}
	return out
}

// monitoredTarget is the target through the proxy, on a client whose
// write commands are recorded, guarded without a sink.
func monitoredTarget(t *testing.T, b *dlBed) (*writeguard.Guarded, *fmtSent) {
	t.Helper()
	sent := &fmtSent{}
	c, err := mongo.Connect(options.Client().ApplyURI(b.proxy.URI()).SetMonitor(sent.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	g, err := writeguard.Wrap(c.Database(b.dbName).Collection(dlTarget), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	return g, sent
}

// decodedEnvelopes reads the DLQ with envelope.Decode (any form).
func decodedEnvelopes(t *testing.T, coll *mongo.Collection) []envelope.Envelope {
	t.Helper()
	cur, err := coll.Find(context.Background(), bson.D{}, options.Find().SetSort(bson.D{{Key: "batch_index", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []envelope.Envelope
	for cur.Next(context.Background()) {
		env, err := envelope.Decode(cur.Current)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestC64DLQKeepsExactBytes: documents whose field names the server
// refuses in a sub-document (a dotted key, a $-prefixed key, a duplicated
// _id) are dead-lettered, not dead_letter_failed: kept as their exact
// bytes, read back by Decode, recovered from the fallback file into
// another DLQ, and replayed as the same bytes.
func TestC64DLQKeepsExactBytes(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dup := []byte{0, 0, 0, 0}
	dup = append(dup, 0x02, '_', 'i', 'd', 0, 4, 0, 0, 0, 'd', 'u', 'p', 0)
	dup = append(dup, 0x02, '_', 'i', 'd', 0, 4, 0, 0, 0, 'd', 'u', 'q', 0, 0)
	dup[0] = byte(len(dup))
	docs := []bson.Raw{
		mustRaw(t, bson.D{{Key: "_id", Value: "dot"}, {Key: "a.b", Value: int32(1)}}),
		mustRaw(t, bson.D{{Key: "_id", Value: "dollar"}, {Key: "$x", Value: int32(1)}}),
		bson.Raw(dup),
	}
	fallback := filepath.Join(t.TempDir(), "fallback.jsonl")
	fs, err := dlq.NewFileSink(fallback)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	g := b.guard(writeguard.WithFallbackDeadLetter(fs))
	for i, d := range docs {
		_, err := g.InsertOne(b.ctx, d)
		rep, ok := err.(*writeguard.Report)
		if !ok || rep.Outcomes[0].Disposition != writeguard.DeadLettered {
			t.Fatalf("document %d: %v, want dead_lettered", i, err)
		}
	}
	envs := decodedEnvelopes(t, b.dlq)
	if len(envs) != len(docs) {
		t.Fatalf("%d envelopes, want %d", len(envs), len(docs))
	}
	for _, env := range envs {
		found := false
		for _, d := range docs {
			found = found || bytes.Equal(env.Original, d)
		}
		if !found || len(env.Binary) != 1 || env.Binary[0].Field != "original" {
			t.Errorf("envelope original %x (binary %+v) is none of the documents' bytes", env.Original, env.Binary)
		}
	}
	if n, err := b.dlq.CountDocuments(b.ctx, bson.D{{Key: "original_raw", Value: bson.D{{Key: "$exists", Value: true}}}}); err != nil || n != 3 {
		t.Errorf("%d envelopes with original_raw (%v), want 3", n, err)
	}

	// The documented recovery from the fallback file: ReadFile, then Put
	// into a DLQ with a MongoSink.
	if err := fs.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	fromFile, err := dlq.ReadFile(fallback)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.EnsureCollection(b.ctx, b.ddb, "recovered"); err != nil {
		t.Fatal(err)
	}
	recovered := b.ddb.Collection("recovered")
	if err := dlq.NewMongoSink(recovered).Put(b.ctx, fromFile); err != nil {
		t.Fatalf("recovery from the fallback file: %v", err)
	}
	if got := decodedEnvelopes(t, recovered); len(got) != 3 {
		t.Errorf("recovered %d envelopes, want 3", len(got))
	}

	// Replay: the target is sent the same bytes.
	b.setValidator(nil)
	target, sent := monitoredTarget(t, b)
	// FerretDB v1 refuses dotted and $-prefixed keys in the target itself
	// (2 BadValue), so the replay ends failed there; what is checked is
	// that it sent the exact bytes (a MongoDB 5.0+ target stores them).
	res, err := replayRun(b, target)
	if res.Scanned != 3 || res.Skipped != 0 || res.Replayed+res.Failed != 3 {
		t.Errorf("replay %+v (%v)", res.Counts, err)
	}
	stmts := sent.statements(t)
	for _, d := range docs {
		found := false
		for _, s := range stmts {
			found = found || bytes.Equal(s, d)
		}
		if !found {
			t.Errorf("replay did not send %x; sent %v", d, stmts)
		}
	}
}

// TestC57ReplayKeepsModelOptions: C57's two updates, rejected with 121,
// are replayed with their arrayFilters, collation, hint and upsert, and
// the call's let: the statements the replay sends are those the caller
// sent.
func TestC57ReplayKeepsModelOptions(t *testing.T) {
	b := newDLBed(t, nil)
	reject := faultproxy.RejectDocuments(func(q bson.Raw) bool { return true }, faultproxy.WriteError{Code: 121, Message: "Document failed validation"})
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.ns()).Always().Do(reject)))
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: int32(1)}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "items.$[it].qty", Value: int32(-5)}}}}).
			SetArrayFilters([]any{bson.D{{Key: "it.sku", Value: "A-1"}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "customer", Value: "ann"}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "vip", Value: true}}}}).
			SetCollation(&options.Collation{Locale: "en", Strength: 2}).SetHint("customer_1").SetUpsert(true),
	}
	caller, callerSent := monitoredTarget(t, b)
	g, err := writeguard.Wrap(caller.Target().(*mongo.Collection), writeguard.WithDeadLetter(b.sink), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.BulkWrite(b.ctx, models, options.BulkWrite().SetOrdered(false).SetLet(bson.D{{Key: "src", Value: "c57"}}))
	if rep, ok := err.(*writeguard.Report); !ok || rep.Outcomes[0].Disposition != writeguard.DeadLettered || rep.Outcomes[1].Disposition != writeguard.DeadLettered {
		t.Fatalf("err %v, want both dead-lettered", err)
	}
	want := callerSent.statements(t)
	if len(want) < 2 {
		t.Fatalf("caller sent %d statements", len(want))
	}
	want = want[len(want)-2:]

	b.proxy.SetScript(nil)
	target, sent := monitoredTarget(t, b)
	// FerretDB v1 refuses let, arrayFilters, collation and hint (238
	// NotImplemented, a whole-command code no source lists as a refusal
	// before running: command_unproven), so the replay holds the updates
	// there (write_outcome_unknown); what is checked is that it sent the
	// caller's statements and let. Updates, and an update whose filter has
	// no _id condition, are replayed only when the operator allows them.
	res, err := replayRun(b, target, replay.WithOperations(replay.Inserts|replay.Updates), replay.WithMultiDocument())
	if res.Scanned != 2 || res.Skipped != 0 || res.Replayed+res.Failed+res.Held != 2 {
		t.Errorf("replay %+v, problems %+v (%v)", res.Counts, res.Problems, err)
	}
	got := sent.statements(t)
	for _, w := range want {
		found := false
		for _, s := range got {
			found = found || bytes.Equal(s, w)
		}
		if !found {
			t.Errorf("replay did not send the statement %s; sent %v", w, got)
		}
	}
	sent.mu.Lock()
	defer sent.mu.Unlock()
	for _, c := range sent.cmds {
		if v, err := c.LookupErr("let", "src"); err != nil || v.StringValue() != "c57" {
			t.Errorf("replayed command without the call's let: %s", c)
		}
	}
}

func mustRaw(t *testing.T, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// c58ErrInfo is the errInfo of C58 (the shape of the server unit test
// EncryptWithSubtypeFailsBecauseNotEncrypted, corpus entry
// encrypt-bsontype-string-not-encrypted, with the property named ssn).
func c58ErrInfo(id any) bson.D {
	return bson.D{{Key: "failingDocumentId", Value: id}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "properties"},
			{Key: "propertiesNotSatisfied", Value: bson.A{bson.D{
				{Key: "propertyName", Value: "ssn"},
				{Key: "details", Value: bson.A{bson.D{{Key: "operatorName", Value: "encrypt"}, {Key: "reason", Value: "value was not encrypted"}}}},
			}}},
		}}},
	}}}
}

// TestC58SecretNeverStored: InsertOne {_id: 7, ssn: "123-45-6789"}
// refused because ssn must be encrypted is dead-lettered without the
// plaintext, in the DLQ and in the fallback file; a replay skips it until
// the caller supplies the field, then writes the supplied document.
func TestC58SecretNeverStored(t *testing.T) {
	const ssn = "123-45-6789"
	b := newDLBed(t, nil)
	reject := faultproxy.RejectDocuments(faultproxy.DocumentID(int32(7)),
		faultproxy.WriteError{Code: 121, Message: "Document failed validation", ErrInfo: c58ErrInfo(int32(7))})
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("insert").In(b.ns()).Always().Do(reject)))
	fallback := filepath.Join(t.TempDir(), "fallback.jsonl")
	fs, err := dlq.NewFileSink(fallback)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	doc := bson.D{{Key: "_id", Value: int32(7)}, {Key: "name", Value: "Ann"}, {Key: "ssn", Value: ssn}}
	_, err = b.guard().InsertOne(b.ctx, doc)
	if rep, ok := err.(*writeguard.Report); !ok || rep.Outcomes[0].Disposition != writeguard.DeadLettered {
		t.Fatalf("%v, want dead_lettered", err)
	}
	cur, err := b.dlq.Find(b.ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var raws []bson.Raw
	if err := cur.All(b.ctx, &raws); err != nil {
		t.Fatal(err)
	}
	if len(raws) != 1 || bytes.Contains(raws[0], []byte(ssn)) {
		t.Fatalf("DLQ holds %d envelopes; plaintext stored: %v", len(raws), len(raws) == 1 && bytes.Contains(raws[0], []byte(ssn)))
	}
	env, err := envelope.Decode(raws[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Withheld) != 1 || env.Withheld[0].Path != "ssn" || env.FingerprintScheme != envelope.SchemeStored {
		t.Errorf("withheld %+v, scheme %q", env.Withheld, env.FingerprintScheme)
	}

	// The fallback file gets the same protection.
	plain := envelope.New(envelope.Capture{Document: mustRaw(t, doc), Namespace: b.ns(), Operation: "insertOne",
		Failure: &policy.Failure{Code: 121, Message: "Document failed validation", ErrInfo: mustRaw(t, c58ErrInfo(int32(7)))}})
	if err := fs.Put(b.ctx, []envelope.Envelope{plain}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fallback)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(ssn)) {
		t.Error("the fallback file holds the plaintext")
	}

	// Replay: skipped without the value, written with it.
	b.proxy.SetScript(nil)
	target, _ := monitoredTarget(t, b)
	res, err := replayRun(b, target)
	if err != nil || res.Skipped != 1 || res.Replayed != 0 || len(res.Problems) != 1 || !strings.Contains(res.Problems[0].Reason, "ssn (encrypt)") {
		t.Fatalf("replay without the value: %+v %+v (%v)", res.Counts, res.Problems, err)
	}
	encrypted := bson.Binary{Subtype: 6, Data: []byte("ciphertext")}
	res, err = replayRun(b, target, replay.WithRunID("with-value"), replay.WithWithheldValues(func(_ context.Context, e envelope.Envelope) (bson.Raw, error) {
		var d bson.D
		if err := bson.Unmarshal(e.Original, &d); err != nil {
			return nil, err
		}
		return bson.Marshal(append(d, bson.E{Key: "ssn", Value: encrypted}))
	}))
	if err != nil || res.Replayed != 1 {
		t.Fatalf("replay with the value: %+v (%v)", res.Counts, err)
	}
	var stored bson.Raw
	if err := b.ddb.Collection(dlTarget).FindOne(b.ctx, bson.D{{Key: "_id", Value: int32(7)}}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	if _, data, ok := stored.Lookup("ssn").BinaryOK(); !ok || string(data) != "ciphertext" || stored.Lookup("name").StringValue() != "Ann" {
		t.Errorf("target holds %s", stored)
	}
}
